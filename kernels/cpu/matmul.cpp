#include "kernels/cpu/matmul.h"

#include <algorithm>

#include "core/result.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/fp16.h"

namespace troupe::cpu {
namespace {

const detail::matmul_kernels& active_kernels() {
    switch (active_level()) {
        case dispatch_level::scalar:
            return detail::scalar_kernels();
        case dispatch_level::avx2:
            return detail::avx2_kernels();
        case dispatch_level::avx512:
            return detail::avx512_kernels();
    }
    return detail::scalar_kernels();
}

// Rows per work item of the dot-product path: enough to amortize the hand-over, a multiple of 4.
constexpr int64_t k_rows_per_item = 16;

// Splits n items of per_item rows each over parallel_for, calling fn(r0, r1) on row ranges.
template <class Split, class Fn>
void for_row_ranges(const Split& split, int64_t n_rows, int64_t per_item, const Fn& fn) {
    const int64_t n_items = (n_rows + per_item - 1) / per_item;
    split(n_items, [&](int64_t begin, int64_t end) { fn(begin * per_item, std::min(n_rows, end * per_item)); });
}

template <class Split>
void matmul_impl(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, const Split& split) {
    TROUPE_ASSERT(matmul_supports(w.type), "matmul: unsupported weight type " + std::string(traits(w.type).name));
    TROUPE_ASSERT(w.n_in % traits(w.type).block_size == 0, "matmul: n_in is not a multiple of the block size");
    TROUPE_ASSERT(w.row_stride >= row_bytes(w.type, w.n_in));
    if (n_tokens <= 0 || w.n_out <= 0) return;
    const detail::matmul_kernels& k = active_kernels();
    const int64_t n = w.n_in;
    const bool use_gemm = k.gemm != nullptr && n_tokens >= k.gemm_min_tokens;

    // Activations, prepared once per call (not per row), tokens split over the threads when many.
    static thread_local aligned_buffer x_buffer;
    detail::prepared_x px{x, static_cast<size_t>(n) * sizeof(float)};
    const auto prepare = [&](auto&& per_token) {
        const auto run = [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) per_token(t);
        };
        if (n_tokens >= 8) {
            split(n_tokens, run);
        } else {
            run(0, n_tokens);
        }
    };
    const bool q8_0_act = w.type == ggml_type::q8_0 || w.type == ggml_type::q4_0;
    const bool q8_k_act = w.type == ggml_type::q4_k || w.type == ggml_type::q6_k;
    if (w.type == ggml_type::f16 || w.type == ggml_type::bf16) {
        float* xr = x_buffer.as<float>(static_cast<size_t>(n_tokens * n));
        const auto round = w.type == ggml_type::f16 ? k.round_f16 : k.round_bf16;
        prepare([&](int64_t t) { round(x + t * n, xr + t * n, n); });
        px = {xr, static_cast<size_t>(n) * sizeof(float)};
    } else if (q8_0_act) {
        const int64_t nb = n / qk8_0;
        const size_t q_bytes = static_cast<size_t>(n_tokens * nb) * sizeof(block_q8_0);
        auto* base = static_cast<uint8_t*>(x_buffer.reserve(q_bytes + (use_gemm ? n_tokens * n * 4 + 64 : 0)));
        auto* xq = reinterpret_cast<block_q8_0*>(base);
        float* xf = reinterpret_cast<float*>(base + (q_bytes + 63) / 64 * 64);
        prepare([&](int64_t t) {
            k.quantize_q8_0(x + t * n, xq + t * nb, n);
            if (use_gemm) {
                for (int64_t b = 0; b < nb; ++b) {
                    const float d = fp16_to_fp32(xq[t * nb + b].d);
                    for (int i = 0; i < qk8_0; ++i) xf[t * n + b * qk8_0 + i] = d * xq[t * nb + b].qs[i];
                }
            }
        });
        px = use_gemm ? detail::prepared_x{xf, static_cast<size_t>(n) * sizeof(float)}
                      : detail::prepared_x{xq, static_cast<size_t>(nb) * sizeof(block_q8_0)};
    } else if (q8_k_act) {
        const int64_t nb = n / qk_k;
        const size_t q_bytes = static_cast<size_t>(n_tokens * nb) * sizeof(block_q8_k);
        auto* base = static_cast<uint8_t*>(x_buffer.reserve(q_bytes + (use_gemm ? n_tokens * n * 4 + 64 : 0)));
        auto* xq = reinterpret_cast<block_q8_k*>(base);
        float* xf = reinterpret_cast<float*>(base + (q_bytes + 63) / 64 * 64);
        prepare([&](int64_t t) {
            k.quantize_q8_k(x + t * n, xq + t * nb, n);
            if (use_gemm) {
                for (int64_t b = 0; b < nb; ++b) {
                    const float d = xq[t * nb + b].d;
                    for (int i = 0; i < qk_k; ++i) xf[t * n + b * qk_k + i] = d * xq[t * nb + b].qs[i];
                }
            }
        });
        px = use_gemm ? detail::prepared_x{xf, static_cast<size_t>(n) * sizeof(float)}
                      : detail::prepared_x{xq, static_cast<size_t>(nb) * sizeof(block_q8_k)};
    }

    if (use_gemm) {
        const float* xf = static_cast<const float*>(px.data);
        for_row_ranges(split, w.n_out, k.gemm_rows,
                       [&](int64_t r0, int64_t r1) { k.gemm(w, xf, y, w.n_out, n_tokens, r0, r1); });
    } else {
        for_row_ranges(split, w.n_out, k_rows_per_item,
                       [&](int64_t r0, int64_t r1) { k.rows(w, px, y, w.n_out, n_tokens, r0, r1); });
    }
}

}  // namespace

void matmul(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, thread_pool& pool) {
    matmul_impl(w, x, y, n_tokens,
                [&pool](int64_t n, const std::function<void(int64_t, int64_t)>& fn) { pool.parallel_for(n, fn); });
}

void matmul(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, const parallel_for_fn& parallel_for) {
    matmul_impl(w, x, y, n_tokens, parallel_for);
}

int64_t gemm_min_tokens() {
    const detail::matmul_kernels& k = active_kernels();
    return k.gemm ? k.gemm_min_tokens : INT64_MAX;
}

}  // namespace troupe::cpu
