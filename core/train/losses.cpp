#include "core/train/losses.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace troupe::train {

void log_softmax(const float* z, float* out, int64_t n) {
    const float mx = *std::max_element(z, z + n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(z[i] - mx));
    const float lse = mx + static_cast<float>(std::log(sum));
    for (int64_t i = 0; i < n; ++i) out[i] = z[i] - lse;
}

loss_sums logit_loss(distill_loss kind, const float* target_logits, const float* z, const int32_t* hard_tokens,
                     int64_t n, int64_t n_vocab, float weight, float hard_weight, float* dz, cpu::thread_pool& pool) {
    const int n_parts = std::max(1, pool.n_threads());
    std::vector<loss_sums> parts(n_parts);
    const int64_t per = (n + n_parts - 1) / n_parts;
    pool.parallel_for(n_parts, [&](int64_t pb, int64_t pe) {
        std::vector<float> lp(n_vocab), lq(n_vocab);  // log p, log q of one row
        for (int64_t part = pb; part < pe; ++part) {
            loss_sums& acc = parts[part];
            for (int64_t r = part * per; r < std::min(n, (part + 1) * per); ++r) {
                const float* t = target_logits + r * n_vocab;
                const float* zr = z + r * n_vocab;
                float* d = dz + r * n_vocab;
                log_softmax(t, lp.data(), n_vocab);
                log_softmax(zr, lq.data(), n_vocab);
                double kl = 0;
                if (kind == distill_loss::reverse_kl) {
                    for (int64_t i = 0; i < n_vocab; ++i) kl += std::exp(lq[i]) * (lq[i] - lp[i]);
                    for (int64_t i = 0; i < n_vocab; ++i) {
                        d[i] = weight * std::exp(lq[i]) * static_cast<float>(lq[i] - lp[i] - kl);
                    }
                } else {
                    for (int64_t i = 0; i < n_vocab; ++i) {
                        const float p = std::exp(lp[i]);
                        kl += p * (lp[i] - lq[i]);
                        d[i] = weight * (std::exp(lq[i]) - p);
                    }
                }
                acc.kl += kl;
                if (hard_tokens != nullptr && hard_tokens[r] >= 0) {
                    const int32_t y = hard_tokens[r];
                    acc.hard -= lq[y];
                    if (kind == distill_loss::kl_hard) {
                        for (int64_t i = 0; i < n_vocab; ++i) d[i] += weight * hard_weight * std::exp(lq[i]);
                        d[y] -= weight * hard_weight;
                    }
                }
                const int64_t at = std::max_element(t, t + n_vocab) - t;
                const int64_t az = std::max_element(zr, zr + n_vocab) - zr;
                acc.agree += at == az ? 1 : 0;
                acc.n_rows += 1;
            }
        }
    });
    loss_sums total;
    for (const loss_sums& p : parts) {
        total.kl += p.kl;
        total.hard += p.hard;
        total.agree += p.agree;
        total.n_rows += p.n_rows;
    }
    return total;
}

double smooth_l1(const float* x, const float* t, float* dx, int64_t n, int64_t dim, float weight) {
    double sum = 0;
    const float inv_dim = 1.0f / static_cast<float>(dim);
    for (int64_t i = 0; i < n * dim; ++i) {
        const float d = x[i] - t[i];
        const float a = std::fabs(d);
        sum += a < 1.0f ? 0.5 * d * d : a - 0.5;
        if (dx != nullptr) dx[i] += weight * inv_dim * std::clamp(d, -1.0f, 1.0f);
    }
    return sum * inv_dim;
}

}  // namespace troupe::train
