#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <vector>

#include "core/result.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kquant_panels.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/q8_panels_kernels.h"
#include "kernels/cpu/streamed_rows.h"
#include "kernels/cpu/weight_pieces.h"
#include "kernels/fp16.h"

namespace troupe::cpu {

const detail::matmul_kernels& detail::active_kernels() {
    switch (active_level()) {
        case dispatch_level::scalar:
            return scalar_kernels();
        case dispatch_level::avx2:
            return avx2_kernels();
        case dispatch_level::avx512:
            return avx512_kernels();
    }
    return scalar_kernels();
}

namespace {

using detail::active_kernels;

bool is_float_type(ggml_type type) {
    return type == ggml_type::f32 || type == ggml_type::f16 || type == ggml_type::bf16;
}

// Tokens from which the GEMM runs for this weight type and recipe (never where the level has none).
int64_t gemm_threshold(const detail::matmul_kernels& k, ggml_type type, cpu::activation_recipe recipe) {
    if (recipe == cpu::activation_recipe::float32) {
        if (k.gemm == nullptr) return INT64_MAX;
        return is_float_type(type) ? k.gemm_min_tokens_float : k.gemm_min_tokens_float_act;
    }
    switch (type) {
        case ggml_type::q8_0:
        case ggml_type::q4_0:
            if (k.gemm == nullptr && k.gemm_q8 == nullptr) return INT64_MAX;
            return k.gemm_min_tokens_q8;
        case ggml_type::q5_0:
        case ggml_type::q2_k:
        case ggml_type::q3_k:
        case ggml_type::q5_k:
            return INT64_MAX;  // the dot kernels at every token count (no GEMM computes ggml's lanes for these)
        case ggml_type::q4_k:
        case ggml_type::q6_k:
            // Only the integer GEMM, bit-equal to the dot kernels (ggml's k-quant arithmetic,
            // kernels/ref/kquant_dot.h), which a float GEMM on dequantized panels is not.
            if (k.gemm_kquant == nullptr) return INT64_MAX;
            return type == ggml_type::q4_k ? k.gemm_min_tokens_q4_k : k.gemm_min_tokens_q6_k;
        default:
            if (k.gemm == nullptr) return INT64_MAX;
            return k.gemm_min_tokens_float;
    }
}

// Rows per work item of the dot-product path: enough to amortize the hand-over, a multiple of 4.
constexpr int64_t k_rows_per_item = 16;
// Float weights: a multiple of their 3-row tiles (float_tile_walk.h), so that no item ends in one-row tiles (5 loads
// per 4 FMAs); an item's rows stay in L2 while its tokens pass in chunks.
constexpr int64_t k_float_rows_per_item = 48;
// Products smaller than this many multiply-adds run on the calling thread (tiny models: the hand-over to
// a worker would cost more than the work).
constexpr int64_t k_inline_macs = 32 * 1024;

// Splits n items of per_item rows each over parallel_for, calling fn(r0, r1) on row ranges.
template <class Split, class Fn>
void for_row_ranges(const Split& split, int64_t n_rows, int64_t per_item, const Fn& fn) {
    const int64_t n_items = (n_rows + per_item - 1) / per_item;
    split(n_items, [&](int64_t begin, int64_t end) { fn(begin * per_item, std::min(n_rows, end * per_item)); });
}

// Runs fn(r0, r1) over the rows of w for the dot-product path: decode-sized steps on a pool with parallel_ranges
// (streamed_rows.h), otherwise items of k_rows_per_item rows claimed one at a time.
template <class Split, class Fn>
void for_dot_rows(const Split& split, const detail::row_streamer& streamer, const matmul_weight& w, int64_t n_tokens,
                  const Fn& fn) {
    if (streamer && n_tokens <= detail::k_max_streamed_tokens) {
        // k-quant panels in units of their groups of four rows (kquant_panels.h), so that no share starts inside one.
        const int64_t unit = detail::has_panels(w) ? kquant_group_rows : 1;
        const int64_t grain = detail::streamed_grain(static_cast<int64_t>(w.row_stride) * unit, k_rows_per_item / unit);
        detail::stream_rows(streamer, w, unit, grain,
                            [&](int64_t u0, int64_t u1) { fn(u0 * unit, std::min(w.n_out, u1 * unit)); });
        return;
    }
    for_row_ranges(split, w.n_out, is_float_type(w.type) ? k_float_rows_per_item : k_rows_per_item, fn);
}

// A kernel call kernel(piece, y_piece, r0, r1) over rows [r0, r1) of w as fn(r0, r1), piece by piece (weight_pieces.h):
// y_piece is y at the piece's first row, the kernel's ldy stays w.n_out.
template <class Kernel>
auto by_pieces(const matmul_weight& w, float* y, const Kernel& kernel) {
    return [&w, y, &kernel](int64_t r0, int64_t r1) {
        detail::for_each_piece(w, r0, r1, [&](const matmul_weight& piece, int64_t first_row, int64_t a, int64_t b) {
            kernel(piece, y + first_row, a, b);
        });
    };
}

// The recipe's activations of one token as floats (rounded to F16 / BF16, or the values of their Q8_0 / Q8_K
// quantization), for the GEMM; `row` is scratch of n floats.
const float* recipe_floats(const detail::matmul_kernels& k, ggml_type type, const float* x, int64_t n, float* row) {
    switch (type) {
        case ggml_type::f16:
            k.round_f16(x, row, n);
            return row;
        case ggml_type::bf16:
            k.round_bf16(x, row, n);
            return row;
        case ggml_type::q8_0:
        case ggml_type::q4_0:
        case ggml_type::q5_0:
            k.q8_0_values(x, row, n);
            return row;
        case ggml_type::q2_k:
        case ggml_type::q3_k:
        case ggml_type::q4_k:
        case ggml_type::q5_k:
        case ggml_type::q6_k:
            k.q8_k_values(x, row, n);
            return row;
        default:
            return x;  // F32
    }
}

// The float-activation recipe: the activations as given, to the GEMM, the float dot kernels (float weights)
// or the dequantize-in-registers kernels (quantized weights).
template <class Split>
void matmul_float_act(const detail::matmul_kernels& k, const matmul_weight& w, const float* x, float* y,
                      int64_t n_tokens, bool use_gemm, const Split& split, const detail::row_streamer& streamer) {
    const int64_t n = w.n_in;
    if (use_gemm) {
        static thread_local aligned_buffer x_buffer;
        float* xp = x_buffer.as<float>(detail::gemm_packed_floats(n_tokens, n, k.gemm_mr));
        const auto pack = [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t)
                detail::gemm_pack_token(x + t * n, t, n_tokens, n, k.gemm_mr, k.gemm_kc, xp);
        };
        if (n_tokens >= 8) {
            split(n_tokens, pack);
        } else {
            pack(0, n_tokens);
        }
        const auto gemm = [&](const matmul_weight& piece, float* yp, int64_t r0, int64_t r1) {
            k.gemm(piece, xp, yp, w.n_out, n_tokens, r0, r1);
        };
        for_row_ranges(split, w.n_out, k.gemm_rows, by_pieces(w, y, gemm));
        return;
    }
    const auto dot = [&](const matmul_weight& piece, float* yp, int64_t r0, int64_t r1) {
        if (is_float_type(w.type)) {
            k.rows(piece, detail::prepared_x{x, static_cast<size_t>(n) * sizeof(float)}, yp, w.n_out, n_tokens, r0, r1);
        } else {
            k.rows_float_act(piece, x, yp, w.n_out, n_tokens, r0, r1);
        }
    };
    const auto rows = by_pieces(w, y, dot);
    if (w.n_out * n * n_tokens < k_inline_macs) {
        rows(0, w.n_out);  // cheaper than waking a thread
    } else {
        for_dot_rows(split, streamer, w, n_tokens, rows);
    }
}

template <class Split>
void matmul_impl(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, activation_recipe recipe,
                 const Split& split, const detail::row_streamer& streamer) {
    TROUPE_ASSERT(matmul_supports(w.type), "matmul: unsupported weight type " + std::string(traits(w.type).name));
    TROUPE_ASSERT(w.n_in % traits(w.type).block_size == 0, "matmul: n_in is not a multiple of the block size");
    TROUPE_ASSERT(w.row_stride >= row_bytes(w.type, w.n_in));
    if (n_tokens <= 0 || w.n_out <= 0) return;
    if (detail::q8_panels_active(w, recipe)) {  // pre-packed Q8_0 / Q4_0 panels: one kernel for every n_tokens
        detail::matmul_q8_panels(w, x, y, n_tokens, recipe, split, streamer);
        return;
    }
    TROUPE_ASSERT(detail::has_rows(w) || (detail::has_panels(w) && kquant_panels_supported(w.type, recipe)),
                  "matmul: the weight keeps only panels, which the active CPU level cannot read");
    const detail::matmul_kernels& k = active_kernels();
    const int64_t n = w.n_in;
    const bool use_gemm = n_tokens >= gemm_threshold(k, w.type, recipe);
    if (recipe == activation_recipe::float32) {
        matmul_float_act(k, w, x, y, n_tokens, use_gemm, split, streamer);
        return;
    }

    // Activations are prepared once per call (not per row), tokens split over the threads when many.
    static thread_local aligned_buffer x_buffer;
    const auto for_tokens = [&](const auto& per_token) {
        const auto run = [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) per_token(t);
        };
        if (n_tokens >= 8) {
            split(n_tokens, run);
        } else {
            run(0, n_tokens);
        }
    };

    const bool q8_weights = w.type == ggml_type::q8_0 || w.type == ggml_type::q4_0;
    const bool k_quant = w.type == ggml_type::q4_k || w.type == ggml_type::q6_k;
    const bool integer_gemm = (q8_weights && k.gemm_q8 != nullptr) || (k_quant && k.gemm_kquant != nullptr);
    if (use_gemm && !integer_gemm) {
        // GEMM: the recipe's float activations, packed once for all threads.
        float* xp = x_buffer.as<float>(detail::gemm_packed_floats(n_tokens, n, k.gemm_mr));
        for_tokens([&](int64_t t) {
            static thread_local aligned_buffer row_buffer;
            const float* values = recipe_floats(k, w.type, x + t * n, n, row_buffer.as<float>(static_cast<size_t>(n)));
            detail::gemm_pack_token(values, t, n_tokens, n, k.gemm_mr, k.gemm_kc, xp);
        });
        const auto gemm = [&](const matmul_weight& piece, float* yp, int64_t r0, int64_t r1) {
            k.gemm(piece, xp, yp, w.n_out, n_tokens, r0, r1);
        };
        for_row_ranges(split, w.n_out, k.gemm_rows, by_pieces(w, y, gemm));
        return;
    }

    // Dot-product kernels: F32 as is, F16 / BF16 rounded floats, Q8_0 or Q8_K blocks.
    detail::prepared_x px{x, static_cast<size_t>(n) * sizeof(float)};
    if (w.type == ggml_type::f16 || w.type == ggml_type::bf16) {
        float* xr = x_buffer.as<float>(static_cast<size_t>(n_tokens * n));
        const auto round = w.type == ggml_type::f16 ? k.round_f16 : k.round_bf16;
        for_tokens([&](int64_t t) { round(x + t * n, xr + t * n, n); });
        px = {xr, static_cast<size_t>(n) * sizeof(float)};
    } else if (w.type == ggml_type::q8_0 || w.type == ggml_type::q4_0 || w.type == ggml_type::q5_0) {
        const int64_t nb = n / qk8_0;
        auto* xq = x_buffer.as<block_q8_0>(static_cast<size_t>(n_tokens * nb));
        for_tokens([&](int64_t t) { k.quantize_q8_0(x + t * n, xq + t * nb, n); });
        px = {xq, static_cast<size_t>(nb) * sizeof(block_q8_0)};
    } else if (is_k_quant(w.type)) {
        const int64_t nb = n / qk_k;
        auto* xq = x_buffer.as<block_q8_k>(static_cast<size_t>(n_tokens * nb));
        for_tokens([&](int64_t t) { k.quantize_q8_k(x + t * n, xq + t * nb, n); });
        px = {xq, static_cast<size_t>(nb) * sizeof(block_q8_k)};
    }
    if (use_gemm) {  // the integer GEMM of Q8_0 / Q4_0 or Q4_K / Q6_K weights
        const auto gemm = k_quant ? k.gemm_kquant : k.gemm_q8;
        const auto gemm_int = [&](const matmul_weight& piece, float* yp, int64_t r0, int64_t r1) {
            gemm(piece, px, yp, w.n_out, n_tokens, r0, r1);
        };
        for_row_ranges(split, w.n_out, k_quant ? k.gemm_kquant_rows : k.gemm_q8_rows, by_pieces(w, y, gemm_int));
        return;
    }
    const auto dot = [&](const matmul_weight& piece, float* yp, int64_t r0, int64_t r1) {
        k.rows(piece, px, yp, w.n_out, n_tokens, r0, r1);
    };
    if (w.n_out * n * n_tokens < k_inline_macs) {
        by_pieces(w, y, dot)(0, w.n_out);  // cheaper than waking a thread
    } else {
        for_dot_rows(split, streamer, w, n_tokens, by_pieces(w, y, dot));
    }
}

}  // namespace

void matmul(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, thread_pool& pool,
            activation_recipe recipe) {
    matmul_impl(
        w, x, y, n_tokens, recipe,
        [&pool](int64_t n, const std::function<void(int64_t, int64_t)>& fn) { pool.parallel_for(n, fn); },
        detail::row_streamer{&pool, nullptr});
}

void matmul(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, const parallel_for_fn& parallel_for,
            activation_recipe recipe) {
    matmul_impl(w, x, y, n_tokens, recipe, parallel_for, detail::row_streamer{});
}

void matmul(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, const parallel_for_fn& parallel_for,
            const parallel_ranges_fn& parallel_ranges, activation_recipe recipe) {
    matmul_impl(w, x, y, n_tokens, recipe, parallel_for, detail::row_streamer{nullptr, &parallel_ranges});
}

namespace {

// matmul's float tiles (3 rows x 4 tokens, the whole k in registers) walk every token for each group of rows: at the
// trainer's sizes the tokens leave L2 and three rows of k leave L1. Without a packed GEMM the product goes in pieces
// that fit: k in chunks of at most 2048 (summed), tokens in blocks of 256 KiB of a chunk. At the AVX-512 level's
// tiles (measured before the packed GEMM took that level) dw (1024 x 2048 -> 5632) went from 17-25% to 43-46% of the
// FMA peak; not measured at the AVX2 level itself.
void matmul_in_cache_blocks(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, thread_pool& pool) {
    constexpr int64_t k_chunk = 2048;
    constexpr int64_t token_block_bytes = 256 * 1024;
    const int64_t k = w.n_in, n = w.n_out;
    const int64_t n_chunks = (k + k_chunk - 1) / k_chunk;
    const int64_t chunk = std::min(k, (k / n_chunks + 15) / 16 * 16);  // equal chunks of whole vectors
    const int64_t block =
        std::max<int64_t>(4, token_block_bytes / (chunk * static_cast<int64_t>(sizeof(float))) / 4 * 4);
    static thread_local std::vector<float> x_part, y_part;  // [block, chunk], [block, n]
    for (int64_t t0 = 0; t0 < n_tokens; t0 += block) {
        const int64_t rows = std::min(block, n_tokens - t0);
        float* yb = y + t0 * n;
        for (int64_t k0 = 0; k0 < k; k0 += chunk) {
            const int64_t kc = std::min(chunk, k - k0);
            matmul_weight piece = w;
            piece.data = static_cast<const uint8_t*>(w.data) + k0 * static_cast<int64_t>(sizeof(float));
            piece.n_in = kc;
            const float* xb = x + t0 * k;
            if (kc != k) {  // the chunk's columns of these tokens, contiguous
                x_part.resize(static_cast<size_t>(rows * kc));
                for (int64_t t = 0; t < rows; ++t) std::copy_n(x + (t0 + t) * k + k0, kc, x_part.data() + t * kc);
                xb = x_part.data();
            }
            if (k0 == 0) {
                matmul(piece, xb, yb, rows, pool, activation_recipe::float32);
                continue;
            }
            y_part.resize(static_cast<size_t>(rows * n));
            matmul(piece, xb, y_part.data(), rows, pool, activation_recipe::float32);
            for (int64_t i = 0; i < rows * n; ++i) yb[i] += y_part[i];
        }
    }
}

}  // namespace

void matmul_for_training(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, thread_pool& pool) {
    TROUPE_ASSERT(w.type == ggml_type::f32 && w.pieces == nullptr && w.panels == nullptr,
                  "matmul_for_training: plain F32 weights only");
    const detail::matmul_kernels& active = active_kernels();
    if (active.gemm_unordered == nullptr) {
        matmul_in_cache_blocks(w, x, y, n_tokens, pool);
        return;
    }
    // Below a micro-tile's tokens the packing costs more than the GEMM saves.
    if (n_tokens < active.gemm_mr) {
        matmul(w, x, y, n_tokens, pool, activation_recipe::float32);
        return;
    }
    detail::matmul_kernels k = active;
    k.gemm = k.gemm_unordered;
    matmul_float_act(
        k, w, x, y, n_tokens, true,
        [&pool](int64_t n, const std::function<void(int64_t, int64_t)>& fn) { pool.parallel_for(n, fn); },
        detail::row_streamer{&pool, nullptr});
}

int64_t gemm_min_tokens(ggml_type type, activation_recipe recipe) {
    return gemm_threshold(active_kernels(), type, recipe);
}

}  // namespace troupe::cpu
