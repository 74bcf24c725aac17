#include "core/train/attention.h"

#include <algorithm>
#include <cmath>

namespace troupe::train {
namespace {

float dot(const float* a, const float* b, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

void axpy(float a, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, float* o, std::span<const int64_t> bounds,
                       const attention_shape& s, attention_cache& cache, cpu::thread_pool& pool) {
    const int64_t n_seg = static_cast<int64_t>(bounds.size()) - 1;
    const int64_t group = s.n_heads / s.n_kv_heads, hd = s.head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    cache.offsets.resize(n_seg);
    int64_t total = 0;
    for (int64_t sg = 0; sg < n_seg; ++sg) {
        const int64_t t = bounds[sg + 1] - bounds[sg];
        cache.offsets[sg] = total;
        total += s.n_heads * t * t;
    }
    cache.probs.assign(static_cast<size_t>(total), 0.0f);
    pool.parallel_for(n_seg * s.n_kv_heads, [&](int64_t begin, int64_t end) {
        for (int64_t job = begin; job < end; ++job) {
            const int64_t sg = job / s.n_kv_heads, kvh = job % s.n_kv_heads;
            const int64_t r0 = bounds[sg], t = bounds[sg + 1] - r0;
            for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
                float* p = cache.probs.data() + cache.offsets[sg] + h * t * t;
                for (int64_t i = 0; i < t; ++i) {
                    const float* qi = q + ((r0 + i) * s.n_heads + h) * hd;
                    float* pi = p + i * t;
                    float mx = -INFINITY;
                    for (int64_t j = 0; j <= i; ++j) {
                        pi[j] = dot(qi, k + ((r0 + j) * s.n_kv_heads + kvh) * hd, hd) * scale;
                        mx = std::max(mx, pi[j]);
                    }
                    float sum = 0;
                    for (int64_t j = 0; j <= i; ++j) sum += pi[j] = std::exp(pi[j] - mx);
                    float* oi = o + ((r0 + i) * s.n_heads + h) * hd;
                    std::fill(oi, oi + hd, 0.0f);
                    for (int64_t j = 0; j <= i; ++j) {
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
                        float* dq, float* dk, float* dv, cpu::thread_pool& pool) {
    const int64_t n_seg = static_cast<int64_t>(bounds.size()) - 1;
    const int64_t group = s.n_heads / s.n_kv_heads, hd = s.head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    pool.parallel_for(n_seg * s.n_kv_heads, [&](int64_t begin, int64_t end) {
        std::vector<float> ds;  // [T] one query row's score gradients
        for (int64_t job = begin; job < end; ++job) {
            const int64_t sg = job / s.n_kv_heads, kvh = job % s.n_kv_heads;
            const int64_t r0 = bounds[sg], t = bounds[sg + 1] - r0;
            ds.resize(t);
            for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
                const float* p = cache.probs.data() + cache.offsets[sg] + h * t * t;
                for (int64_t i = 0; i < t; ++i) {
                    const int64_t qrow = ((r0 + i) * s.n_heads + h) * hd;
                    const float* doi = d_o + qrow;
                    const float* pi = p + i * t;
                    float pdp = 0;  // Σ_j p_ij dp_ij
                    for (int64_t j = 0; j <= i; ++j) {
                        const int64_t kvrow = ((r0 + j) * s.n_kv_heads + kvh) * hd;
                        axpy(pi[j], doi, dv + kvrow, hd);
                        ds[j] = dot(doi, v + kvrow, hd);
                        pdp += pi[j] * ds[j];
                    }
                    for (int64_t j = 0; j <= i; ++j) {
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
