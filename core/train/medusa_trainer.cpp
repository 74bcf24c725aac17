#include <random>

#include "core/train/adam.h"
#include "core/train/distill.h"

namespace troupe::train {

std::vector<curve_point> train_medusa(medusa_heads& heads, const float_llama& target, const distill_dataset& data,
                                      const train_params& p, cpu::thread_pool& pool, const progress_fn& progress) {
    const int64_t d = heads.dim(), nv = heads.n_vocab(), b = p.batch;
    std::vector<std::vector<float>> features;       // per sample [n, dim]
    std::vector<std::pair<int32_t, int32_t>> rows;  // (sample, j) of every training position
    for (size_t s = 0; s < data.train.size(); ++s) {
        features.push_back(normed_features(data.train[s], target));
        for (int32_t j = 0; j < data.train[s].size(); ++j) rows.emplace_back(static_cast<int32_t>(s), j);
    }
    adam opt(heads.params(), adam_params{p.lr});
    std::mt19937_64 rng(p.seed);
    std::uniform_int_distribution<size_t> pick(0, rows.size() - 1);
    std::vector<float> f(b * d), logits(b * nv), targets(b * nv), dlogits(b * nv);  // this head's batch
    std::vector<int32_t> labels(b);
    medusa_cache cache;
    std::vector<curve_point> curve;
    for (int32_t step = 0; step < p.steps; ++step) {
        zero_grads(heads.params(), &pool);
        curve_point pt{step + 1};
        for (int32_t h = 0; h < heads.n_heads(); ++h) {
            for (int64_t r = 0; r < b;) {  // positions where head h's soft label (logits at j + h + 1) exists
                const auto [s, j] = rows[pick(rng)];
                const distill_sample& smp = data.train[s];
                if (j + h + 1 >= smp.size()) continue;
                std::copy_n(features[s].begin() + static_cast<int64_t>(j) * d, d, f.begin() + r * d);
                std::copy_n(smp.logits.begin() + static_cast<int64_t>(j + h + 1) * nv, nv, targets.begin() + r * nv);
                labels[r] = j + h + 2 < smp.size() ? smp.tokens[j + h + 2] : -1;
                r += 1;
            }
            heads.forward(h, f.data(), b, logits.data(), cache, pool);
            const loss_sums ls = logit_loss(p.loss, targets.data(), logits.data(), labels.data(), b, nv,
                                            1.0f / static_cast<float>(b), p.hard_weight, dlogits.data(), pool);
            heads.backward(h, f.data(), b, dlogits.data(), cache, nullptr, pool);
            pt.kl += ls.kl / b;
            pt.hard += ls.hard / b;
            pt.top1 += static_cast<double>(ls.agree) / b / heads.n_heads();
        }
        pt.loss = pt.kl + (p.loss == distill_loss::kl_hard ? p.hard_weight * pt.hard : 0.0);
        opt.step(lr_schedule(step, p.steps), &pool);
        curve.push_back(pt);
        if (progress) progress(pt);
    }
    return curve;
}

std::vector<double> medusa_accuracy(const medusa_heads& heads, const float_llama& target,
                                    const std::vector<distill_sample>& samples, cpu::thread_pool& pool) {
    const int64_t nv = heads.n_vocab();
    std::vector<int64_t> agree(heads.n_heads(), 0), total(heads.n_heads(), 0);
    medusa_cache cache;
    std::vector<float> logits;
    for (const distill_sample& s : samples) {
        const std::vector<float> f = normed_features(s, target);
        logits.resize(static_cast<size_t>(s.size()) * nv);
        for (int32_t h = 0; h < heads.n_heads(); ++h) {
            heads.forward(h, f.data(), s.size(), logits.data(), cache, pool);
            for (int32_t j = 0; j + h + 1 < s.size(); ++j) {
                const float* z = logits.data() + static_cast<int64_t>(j) * nv;
                const float* t = s.logits.data() + static_cast<int64_t>(j + h + 1) * nv;
                agree[h] += std::max_element(z, z + nv) - z == std::max_element(t, t + nv) - t ? 1 : 0;
                total[h] += 1;
            }
        }
    }
    std::vector<double> out;
    for (int32_t h = 0; h < heads.n_heads(); ++h) {
        out.push_back(total[h] == 0 ? 0.0 : static_cast<double>(agree[h]) / static_cast<double>(total[h]));
    }
    return out;
}

}  // namespace troupe::train
