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

std::vector<curve_point> train_eagle(eagle_layer& layer, const distill_dataset& data, const train_params& p,
                                     cpu::thread_pool& pool, const progress_fn& progress) {
    const int64_t d = layer.hp().dim, nv = layer.hp().n_vocab;
    adam opt(layer.params(), adam_params{p.lr});
    std::mt19937_64 rng(p.seed);
    std::uniform_int_distribution<size_t> pick(0, data.train.size() - 1);
    std::vector<curve_point> curve;
    std::vector<float> g, logits, dlogits, dg;
    for (int32_t step = 0; step < p.steps; ++step) {
        std::vector<const distill_sample*> chosen;
        for (int64_t rows = 0; rows < p.batch;) {
            chosen.push_back(&data.train[pick(rng)]);
            rows += chosen.back()->size() - 1;
        }
        const eagle_rows r = make_eagle_rows(chosen, static_cast<int32_t>(d), static_cast<int32_t>(nv));
        const int64_t n = static_cast<int64_t>(r.batch.tokens.size());
        g.resize(n * d);
        logits.resize(n * nv);
        dlogits.resize(n * nv);
        dg.assign(n * d, 0.0f);
        zero_grads(layer.params());
        layer.forward(r.batch, g.data(), logits.data(), pool);
        const float w = 1.0f / static_cast<float>(n);
        const loss_sums ls = logit_loss(p.loss, r.target_logits.data(), logits.data(), r.labels.data(), n, nv, w,
                                        p.hard_weight, dlogits.data(), pool);
        const double feat = smooth_l1(g.data(), r.target_features.data(), dg.data(), n, d, w * p.feature_weight);
        layer.backward(r.batch, dg.data(), dlogits.data(), pool);
        opt.step(lr_schedule(step, p.steps));
        curve_point pt{step + 1};
        pt.kl = ls.kl / n;
        pt.hard = ls.hard / n;
        pt.feature = feat / n;
        pt.top1 = static_cast<double>(ls.agree) / n;
        pt.loss =
            pt.kl + p.feature_weight * pt.feature + (p.loss == distill_loss::kl_hard ? p.hard_weight * pt.hard : 0);
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

}  // namespace troupe::train
