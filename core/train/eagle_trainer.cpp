#include <algorithm>
#include <random>

#include "core/train/adam.h"
#include "core/train/distill.h"

namespace troupe::train {

eagle_rows make_eagle_rows(const std::vector<const distill_sample*>& samples, int32_t dim, int32_t n_vocab) {
    eagle_rows out;
    out.batch.bounds.push_back(0);
    for (const distill_sample* s : samples) {
        const int32_t n = s->size();
        if (n < 2) continue;
        for (int32_t j = 0; j + 1 < n; ++j) {
            out.batch.tokens.push_back(s->tokens[j + 1]);
            out.batch.positions.push_back(j);
            out.labels.push_back(j + 2 < n ? s->tokens[j + 2] : -1);
        }
        out.batch.features.insert(out.batch.features.end(), s->hidden.begin(),
                                  s->hidden.begin() + static_cast<int64_t>(n - 1) * dim);
        out.target_features.insert(out.target_features.end(), s->hidden.begin() + dim, s->hidden.end());
        out.target_logits.insert(out.target_logits.end(), s->logits.begin() + n_vocab, s->logits.end());
        out.batch.bounds.push_back(out.batch.bounds.back() + n - 1);
    }
    return out;
}

eagle_batch stack_passes(const eagle_batch& rows, int32_t passes, const std::vector<float>& g_before, int32_t dim) {
    eagle_batch out;
    out.passes = passes;
    out.bounds.push_back(0);
    const int32_t before = passes - 1;  // blocks per segment of the batch g_before came from
    for (size_t sg = 0; sg + 1 < rows.bounds.size(); ++sg) {
        const int64_t r0 = rows.bounds[sg], t = rows.bounds[sg + 1] - r0;
        for (int32_t u = 1; u <= passes; ++u) {
            for (int64_t i = 0; i < t; ++i) {
                out.tokens.push_back(rows.tokens[r0 + i]);
                out.positions.push_back(rows.positions[r0 + i]);
                // Block u > 1 takes the output of block u - 1 at the position before (the chain's feature); its
                // first u - 1 rows have none and take the target's feature (they carry no loss).
                const float* f = rows.features.data() + (r0 + i) * dim;
                if (u > 1 && i >= u - 1) f = g_before.data() + ((r0 * before) + (u - 2) * t + (i - 1)) * dim;
                out.features.insert(out.features.end(), f, f + dim);
            }
        }
        out.bounds.push_back(out.bounds.back() + passes * t);
    }
    return out;
}

std::vector<curve_point> train_eagle(eagle_layer& layer, const distill_dataset& data, const train_params& p,
                                     cpu::thread_pool& pool, const progress_fn& progress) {
    const int64_t d = layer.hp().dim, nv = layer.hp().n_vocab;
    const int32_t passes = std::max(1, p.eagle_passes);
    adam opt(layer.params(), adam_params{p.lr});
    std::mt19937_64 rng(p.seed);
    std::uniform_int_distribution<size_t> pick(0, data.train.size() - 1);
    std::vector<curve_point> curve;
    std::vector<float> g, g_before, logits, dlogits, dg;
    for (int32_t step = 0; step < p.steps; ++step) {
        std::vector<const distill_sample*> chosen;
        for (int64_t rows = 0; rows < p.batch;) {
            chosen.push_back(&data.train[pick(rng)]);
            rows += chosen.back()->size() - 1;
        }
        const eagle_rows r = make_eagle_rows(chosen, static_cast<int32_t>(d), static_cast<int32_t>(nv));
        // The chain's features, one pass deeper at a time (no gradient through them), then the stacked batch.
        eagle_batch b = r.batch;
        for (int32_t s = 2; s <= passes; ++s) {
            const int64_t n_before = static_cast<int64_t>(b.tokens.size());
            g_before.resize(n_before * d);
            logits.resize(n_before * nv);
            layer.forward(b, g_before.data(), logits.data(), pool);
            b = stack_passes(r.batch, s, g_before, static_cast<int32_t>(d));
        }
        const int64_t n = static_cast<int64_t>(b.tokens.size());
        g.resize(n * d);
        logits.resize(n * nv);
        dlogits.assign(n * nv, 0.0f);
        dg.assign(n * d, 0.0f);
        zero_grads(layer.params());
        layer.forward(b, g.data(), logits.data(), pool);
        // Each segment's blocks against the same targets (rows of block u from position u - 1 on); the curve
        // reports the first block's (the target's features, as before) and the sum of all in the loss.
        const int64_t n_true = static_cast<int64_t>(r.batch.tokens.size());
        const float w = 1.0f / static_cast<float>(n_true);
        loss_sums first;
        double feat_first = 0, total = 0;
        for (size_t sg = 0; sg + 1 < r.batch.bounds.size(); ++sg) {
            const int64_t r0 = r.batch.bounds[sg], t = r.batch.bounds[sg + 1] - r0;
            for (int32_t u = 1; u <= passes; ++u) {
                const int64_t skip = u - 1, m = t - skip;
                if (m <= 0) continue;
                const int64_t row = b.bounds[sg] + (u - 1) * t + skip, target = r0 + skip;
                const loss_sums ls =
                    logit_loss(p.loss, r.target_logits.data() + target * nv, logits.data() + row * nv,
                               r.labels.data() + target, m, nv, w, p.hard_weight, dlogits.data() + row * nv, pool);
                const double feat = smooth_l1(g.data() + row * d, r.target_features.data() + target * d,
                                              dg.data() + row * d, m, d, w * p.feature_weight);
                total +=
                    ls.kl + p.feature_weight * feat + (p.loss == distill_loss::kl_hard ? p.hard_weight * ls.hard : 0);
                if (u == 1) {
                    first.kl += ls.kl;
                    first.hard += ls.hard;
                    first.agree += ls.agree;
                    feat_first += feat;
                }
            }
        }
        layer.backward(b, dg.data(), dlogits.data(), pool);
        opt.step(lr_schedule(step, p.steps));
        curve_point pt{step + 1};
        pt.kl = first.kl / n_true;
        pt.hard = first.hard / n_true;
        pt.feature = feat_first / n_true;
        pt.top1 = static_cast<double>(first.agree) / n_true;
        pt.loss = total / n_true;
        curve.push_back(pt);
        if (progress) progress(pt);
    }
    return curve;
}

double eagle_accuracy(eagle_layer& layer, const std::vector<distill_sample>& samples, cpu::thread_pool& pool) {
    const int64_t d = layer.hp().dim, nv = layer.hp().n_vocab;
    int64_t agree = 0, total = 0;
    std::vector<float> g, logits, dz;
    for (const distill_sample& s : samples) {
        const eagle_rows r = make_eagle_rows({&s}, static_cast<int32_t>(d), static_cast<int32_t>(nv));
        const int64_t n = static_cast<int64_t>(r.batch.tokens.size());
        if (n == 0) continue;
        g.resize(n * d);
        logits.resize(n * nv);
        dz.resize(n * nv);
        layer.forward(r.batch, g.data(), logits.data(), pool);
        const loss_sums ls =
            logit_loss(distill_loss::kl, r.target_logits.data(), logits.data(), nullptr, n, nv, 0, 0, dz.data(), pool);
        agree += ls.agree;
        total += n;
    }
    return total == 0 ? 0.0 : static_cast<double>(agree) / static_cast<double>(total);
}

namespace {

int64_t argmax(const float* x, int64_t n) {
    return std::max_element(x, x + n) - x;
}

}  // namespace

eagle_chain_accuracy eagle_two_step_accuracy(eagle_layer& layer, const std::vector<distill_sample>& samples,
                                             int32_t stride, cpu::thread_pool& pool) {
    const int64_t d = layer.hp().dim, nv = layer.hp().n_vocab;
    int64_t n_first = 0, first_ok = 0, second_ok = 0;
    std::vector<float> g, logits, g2, logits2;
    for (const distill_sample& s : samples) {
        const eagle_rows r = make_eagle_rows({&s}, static_cast<int32_t>(d), static_cast<int32_t>(nv));
        const int64_t n = static_cast<int64_t>(r.batch.tokens.size());  // rows j = 0 .. n-1 draft t_{j+2}
        if (n < 2) continue;
        g.resize(n * d);
        logits.resize(n * nv);
        layer.forward(r.batch, g.data(), logits.data(), pool);
        // Second drafts: for each chosen j with j + 3 < size, the rows 0 .. j as they are, then one fed-back row.
        eagle_batch b2;
        b2.bounds.push_back(0);
        std::vector<int64_t> js;
        for (int64_t j = 0; j + 3 < s.size(); j += stride) {
            const bool ok = argmax(logits.data() + j * nv, nv) == argmax(r.target_logits.data() + j * nv, nv);
            n_first += 1;
            first_ok += ok ? 1 : 0;
            if (!ok) continue;
            for (int64_t i = 0; i <= j; ++i) {
                b2.tokens.push_back(r.batch.tokens[i]);
                b2.positions.push_back(static_cast<int32_t>(i));
            }
            b2.features.insert(b2.features.end(), r.batch.features.begin(), r.batch.features.begin() + (j + 1) * d);
            b2.tokens.push_back(s.tokens[j + 2]);
            b2.positions.push_back(static_cast<int32_t>(j + 1));
            b2.features.insert(b2.features.end(), g.begin() + j * d, g.begin() + (j + 1) * d);
            b2.bounds.push_back(static_cast<int64_t>(b2.tokens.size()));
            js.push_back(j);
        }
        if (js.empty()) continue;
        const int64_t n2 = static_cast<int64_t>(b2.tokens.size());
        g2.resize(n2 * d);
        logits2.resize(n2 * nv);
        layer.forward(b2, g2.data(), logits2.data(), pool);
        for (size_t k = 0; k < js.size(); ++k) {
            const int64_t row = b2.bounds[k + 1] - 1;  // the fed-back row: its draft of t_{j+3}
            const float* target = s.logits.data() + (js[k] + 2) * nv;
            second_ok += argmax(logits2.data() + row * nv, nv) == argmax(target, nv) ? 1 : 0;
        }
    }
    eagle_chain_accuracy a;
    a.first = n_first == 0 ? 0.0 : static_cast<double>(first_ok) / static_cast<double>(n_first);
    a.second_given_first = first_ok == 0 ? 0.0 : static_cast<double>(second_ok) / static_cast<double>(first_ok);
    return a;
}

}  // namespace troupe::train
