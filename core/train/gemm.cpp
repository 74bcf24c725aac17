#include "core/train/gemm.h"

#include "kernels/cpu/matmul.h"

namespace troupe::train {

void gemm_nt(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, cpu::thread_pool& pool) {
    if (m == 0 || n == 0) return;
    const matmul_weight w{ggml_type::f32, b, k, n, static_cast<size_t>(k) * sizeof(float)};
    cpu::matmul_for_training(w, a, c, m, pool);
}

void gemm_nt_acc(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, cpu::thread_pool& pool) {
    thread_local std::vector<float> tmp;  // [m, n]
    tmp.resize(static_cast<size_t>(m * n));
    gemm_nt(a, b, tmp.data(), m, n, k, pool);
    const float* sums = tmp.data();  // the workers would name their own thread_local tmp
    pool.parallel_for(m, [&](int64_t first, int64_t last) {
        for (int64_t i = first * n; i < last * n; ++i) c[i] += sums[i];
    });
}

void transpose(const float* in, float* out, int64_t rows, int64_t cols, cpu::thread_pool* pool) {
    constexpr int64_t tile = 32;                           // cache-friendly blocks of both sides
    const auto bands = [&](int64_t first, int64_t last) {  // bands of `tile` input rows
        for (int64_t r0 = first * tile; r0 < std::min(rows, last * tile); r0 += tile) {
            for (int64_t c0 = 0; c0 < cols; c0 += tile) {
                const int64_t r1 = std::min(rows, r0 + tile), c1 = std::min(cols, c0 + tile);
                for (int64_t r = r0; r < r1; ++r) {
                    for (int64_t c = c0; c < c1; ++c) out[c * rows + r] = in[r * cols + c];
                }
            }
        }
    };
    const int64_t n_bands = (rows + tile - 1) / tile;
    if (pool != nullptr) {
        pool->parallel_for(n_bands, bands);
    } else {
        bands(0, n_bands);
    }
}

}  // namespace troupe::train
