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
        zero_grads(layer.params(), &pool);
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
        opt.step(lr_schedule(step, p.steps), &pool);
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

std::vector<double> eagle_chain_accuracy(eagle_layer& layer, const std::vector<distill_sample>& samples, int32_t depth,
                                         cpu::thread_pool& pool) {
    const int64_t d = layer.hp().dim, nv = layer.hp().n_vocab;
    std::vector<int64_t> tried(static_cast<size_t>(depth), 0), matched(static_cast<size_t>(depth), 0);
    std::vector<float> g, logits;
    for (const distill_sample& s : samples) {
        const eagle_rows r = make_eagle_rows({&s}, static_cast<int32_t>(d), static_cast<int32_t>(nv));
        const int64_t t = static_cast<int64_t>(r.batch.tokens.size());
        if (t == 0) continue;
        eagle_batch b = r.batch;  // as training stacks it: block u is depth u
        for (int32_t u = 2; u <= depth; ++u) {
            g.resize(b.tokens.size() * d);
            logits.resize(b.tokens.size() * nv);
            layer.forward(b, g.data(), logits.data(), pool);
            b = stack_passes(r.batch, u, g, static_cast<int32_t>(d));
        }
        g.resize(b.tokens.size() * d);
        logits.resize(b.tokens.size() * nv);
        layer.forward(b, g.data(), logits.data(), pool);
        for (int64_t i0 = 0; i0 < t; ++i0) {  // a chain drafted after the context ending at row i0
            for (int32_t u = 1; u <= depth && i0 + u - 1 < t; ++u) {
                const int64_t i = i0 + u - 1;
                const int64_t want = argmax(r.target_logits.data() + i * nv, nv);
                tried[static_cast<size_t>(u - 1)] += 1;
                if (argmax(logits.data() + ((u - 1) * t + i) * nv, nv) != want) break;
                matched[static_cast<size_t>(u - 1)] += 1;
                if (r.labels[static_cast<size_t>(i)] != want) break;  // the next row would be fed another token
            }
        }
    }
    std::vector<double> out(static_cast<size_t>(depth), 0.0);
    for (size_t u = 0; u < out.size(); ++u)
        out[u] = tried[u] == 0 ? 0.0 : static_cast<double>(matched[u]) / static_cast<double>(tried[u]);
    return out;
}

}  // namespace troupe::train
