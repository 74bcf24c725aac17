#include "core/train/attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/result.h"

namespace troupe::train {
namespace {

// Eight partial sums (a head's dot is the inner loop of attention's O(T²) work): the compiler keeps them in one
// vector register, where a single running sum would stay scalar.
float dot(const float* a, const float* b, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
    }
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

void axpy(float a, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

void visible_rows(int64_t rows, int32_t passes, int64_t i, std::vector<int64_t>& out) {
    out.clear();
    const int64_t t = rows / passes, s = i / t + 1, pos = i % t;  // block s (1-based), position pos
    for (int64_t j = 0; j <= pos - s + 1; ++j) out.push_back(j);
    for (int64_t u = 2; u <= s; ++u) {
        const int64_t at = pos - s + u;
        if (at >= 0) out.push_back((u - 1) * t + at);
    }
}

void attention_forward(const float* q, const float* k, const float* v, float* o, std::span<const int64_t> bounds,
                       const attention_shape& s, attention_cache& cache, cpu::thread_pool& pool, int32_t passes) {
    const int64_t n_seg = static_cast<int64_t>(bounds.size()) - 1;
    const int64_t group = s.n_heads / s.n_kv_heads, hd = s.head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    cache.offsets.resize(n_seg);
    int64_t total = 0;
    for (int64_t sg = 0; sg < n_seg; ++sg) {
        const int64_t t = bounds[sg + 1] - bounds[sg];
        TROUPE_ASSERT(passes >= 1 && t % passes == 0, "attention: segment " + std::to_string(sg) + " has " +
                                                          std::to_string(t) + " rows, not " + std::to_string(passes) +
                                                          " passes of equal length");
        cache.offsets[sg] = total;
        total += s.n_heads * t * t;
    }
    cache.probs.assign(static_cast<size_t>(total), 0.0f);
    pool.parallel_for(n_seg * s.n_kv_heads, [&](int64_t begin, int64_t end) {
        std::vector<int64_t> seen;  // the visible rows of one query row
        for (int64_t job = begin; job < end; ++job) {
            const int64_t sg = job / s.n_kv_heads, kvh = job % s.n_kv_heads;
            const int64_t r0 = bounds[sg], t = bounds[sg + 1] - r0;
            for (int64_t i = 0; i < t; ++i) {
                visible_rows(t, passes, i, seen);
                for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
                    float* pi = cache.probs.data() + cache.offsets[sg] + h * t * t + i * t;
                    const float* qi = q + ((r0 + i) * s.n_heads + h) * hd;
                    float mx = -INFINITY;
                    for (int64_t j : seen) {
                        pi[j] = dot(qi, k + ((r0 + j) * s.n_kv_heads + kvh) * hd, hd) * scale;
                        mx = std::max(mx, pi[j]);
                    }
                    float sum = 0;
                    for (int64_t j : seen) sum += pi[j] = std::exp(pi[j] - mx);
                    float* oi = o + ((r0 + i) * s.n_heads + h) * hd;
                    std::fill(oi, oi + hd, 0.0f);
                    for (int64_t j : seen) {
                        pi[j] /= sum;
                        axpy(pi[j], v + ((r0 + j) * s.n_kv_heads + kvh) * hd, oi, hd);
                    }
                }
            }
        }
    });
}

void attention_backward(const float* q, const float* k, const float* v, const float* d_o,
                        std::span<const int64_t> bounds, const attention_shape& s, const attention_cache& cache,
                        float* dq, float* dk, float* dv, cpu::thread_pool& pool, int32_t passes) {
    const int64_t n_seg = static_cast<int64_t>(bounds.size()) - 1;
    const int64_t group = s.n_heads / s.n_kv_heads, hd = s.head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    pool.parallel_for(n_seg * s.n_kv_heads, [&](int64_t begin, int64_t end) {
        std::vector<float> ds;      // [T] one query row's score gradients
        std::vector<int64_t> seen;  // the visible rows of one query row
        for (int64_t job = begin; job < end; ++job) {
            const int64_t sg = job / s.n_kv_heads, kvh = job % s.n_kv_heads;
            const int64_t r0 = bounds[sg], t = bounds[sg + 1] - r0;
            ds.resize(t);
            for (int64_t i = 0; i < t; ++i) {
                visible_rows(t, passes, i, seen);
                for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
                    const float* pi = cache.probs.data() + cache.offsets[sg] + h * t * t + i * t;
                    const int64_t qrow = ((r0 + i) * s.n_heads + h) * hd;
                    const float* doi = d_o + qrow;
                    float pdp = 0;  // Σ_j p_ij dp_ij
                    for (int64_t j : seen) {
                        const int64_t kvrow = ((r0 + j) * s.n_kv_heads + kvh) * hd;
                        axpy(pi[j], doi, dv + kvrow, hd);
                        ds[j] = dot(doi, v + kvrow, hd);
                        pdp += pi[j] * ds[j];
                    }
                    for (int64_t j : seen) {
                        const int64_t kvrow = ((r0 + j) * s.n_kv_heads + kvh) * hd;
                        const float g = pi[j] * (ds[j] - pdp) * scale;
                        axpy(g, k + kvrow, dq + qrow, hd);
                        axpy(g, q + qrow, dk + kvrow, hd);
                    }
                }
            }
        }
    });
}

}  // namespace troupe::train
