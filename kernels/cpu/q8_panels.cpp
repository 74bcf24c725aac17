// Packing of Q8_0 / Q4_0 weights into row panels (layout in q8_panels.h) and the matmul driver of the panel
// kernels. Packing runs once at load, in portable C++; the products are in q8_panels_avx512.cpp (quantized
// activations), q8_panels_float_act_avx512.cpp (float activations) and q8_panels_avx2.cpp (quantized, AVX2).
#include "kernels/cpu/q8_panels.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/result.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/q8_panels_kernels.h"
#include "kernels/cpu/streamed_rows.h"
#include "kernels/cpu/weight_pieces.h"
#include "kernels/fp16.h"

namespace troupe::cpu {
namespace detail {
namespace {

bool is_panel_type(ggml_type type) {
    return type == ggml_type::q8_0 || type == ggml_type::q4_0;
}

// Writes panel p of w at dst (geometry g; dst zeroed by the caller, so padding rows stay zero), Q8_0 codes in form
// `codes`.
void pack_panel(const matmul_weight& w, const q8_panel_geometry& g, int64_t p, panel_codes codes, uint8_t* dst) {
    const bool q8 = w.type == ggml_type::q8_0;
    const uint8_t q8_flip = codes == panel_codes::plus_128 ? 0x80 : 0x00;
    const size_t block_bytes = q8 ? sizeof(block_q8_0) : sizeof(block_q4_0);
    const int64_t n_rows = std::min<int64_t>(k_panel_rows, w.n_out - p * k_panel_rows);
    for (int64_t b = 0; b < g.n_blocks; ++b) {
        uint8_t* group = dst + static_cast<size_t>(b / 2) * g.group_bytes;
        auto* scales = reinterpret_cast<uint16_t*>(group) + k_panel_rows * (b % 2);  // [16 rows] fp16
        uint8_t* quads = group + 64 + static_cast<size_t>(b % 2) * g.quads * 64;     // [Q][16 rows][4]
        for (int64_t r = 0; r < n_rows; ++r) {
            const uint8_t* src = static_cast<const uint8_t*>(w.data) +
                                 static_cast<size_t>(p * k_panel_rows + r) * w.row_stride + b * block_bytes;
            uint16_t d;
            std::memcpy(&d, src, sizeof d);  // both block types start with the fp16 scale
            scales[r] = d;
            const uint8_t* qs = src + sizeof d;
            for (int q = 0; q < g.quads; ++q) {
                for (int j = 0; j < 4; ++j) {
                    const uint8_t byte = qs[4 * q + j];
                    quads[q * 64 + r * 4 + j] = q8 ? static_cast<uint8_t>(byte ^ q8_flip) : byte;
                }
            }
        }
    }
}

}  // namespace

q8_panel_geometry q8_panel_geometry_of(ggml_type type, int64_t n_in, int64_t n_out) {
    TROUPE_ASSERT(is_panel_type(type), "q8 panels: weight type " + std::string(traits(type).name) +
                                           " has no panel form (Q8_0 or Q4_0 only)");
    TROUPE_ASSERT(n_in % qk8_0 == 0, "q8 panels: n_in " + std::to_string(n_in) + " is not a multiple of 32");
    q8_panel_geometry g;
    g.quads = type == ggml_type::q8_0 ? 8 : 4;
    g.group_bytes = 64 + 2 * static_cast<size_t>(g.quads) * 64;
    g.n_blocks = n_in / qk8_0;
    g.panel_bytes = static_cast<size_t>(g.n_blocks / 2) * g.group_bytes +
                    (g.n_blocks % 2 ? 64 + static_cast<size_t>(g.quads) * 64 : 0);
    g.n_panels = (n_out + k_panel_rows - 1) / k_panel_rows;
    return g;
}

void q8_panels_prepare(const float* x, int64_t n_in, ggml_type type, q8_act_block* out, int64_t stride) {
    const int64_t nb = n_in / qk8_0;
    static thread_local aligned_buffer row_buffer;
    auto* q = row_buffer.as<block_q8_0>(static_cast<size_t>(nb));
    active_kernels().quantize_q8_0(x, q, n_in);  // bit-exact with ref::quantize_activations_q8_0 at every level
    const int32_t offset = type == ggml_type::q8_0 ? 128 : 8;
    for (int64_t b = 0; b < nb; ++b) {
        q8_act_block& a = out[b * stride];
        std::memcpy(a.qs, q[b].qs, qk8_0);
        int32_t sum = 0;
        for (int i = 0; i < qk8_0; ++i) sum += q[b].qs[i];
        a.d = fp16_to_fp32(q[b].d);
        a.neg_corr = -offset * sum;
    }
}

bool q8_panels_active(const matmul_weight& w, activation_recipe recipe) {
    return has_panels(w) && q8_panels_supported(w.type, recipe);
}

void matmul_q8_panels(const matmul_weight& w, const float* x, float* y, int64_t n_tokens, activation_recipe recipe,
                      const parallel_for_fn& parallel_for, const row_streamer& streamer) {
    const q8_panel_geometry g = q8_panel_geometry_of(w.type, w.n_in, w.n_out);
    const bool quantized = recipe == activation_recipe::quantized;
    const bool avx512 = active_level() == dispatch_level::avx512;  // else AVX2 (q8_panels_supported)
    // Activations once per call, [n_blocks][n_tokens] blocks: a tile's tokens are adjacent for every block.
    static thread_local aligned_buffer x_buffer;
    auto* xq = quantized ? x_buffer.as<q8_act_block>(static_cast<size_t>(g.n_blocks * n_tokens)) : nullptr;
    auto* xf = quantized ? nullptr : x_buffer.as<float>(static_cast<size_t>(n_tokens * w.n_in));
    const auto prepare = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            if (quantized) {
                q8_panels_prepare(x + t * w.n_in, w.n_in, w.type, xq + t, n_tokens);
                continue;
            }
            for (int64_t b = 0; b < g.n_blocks; ++b)
                std::memcpy(xf + (b * n_tokens + t) * qk8_0, x + t * w.n_in + b * qk8_0, qk8_0 * sizeof(float));
        }
    };
    // Panels [p0, p1) of w, piece by piece (each piece starts a panel).
    const auto product = [&](int64_t p0, int64_t p1) {
        const int64_t r1 = std::min(w.n_out, p1 * k_panel_rows);
        for_each_piece(w, p0 * k_panel_rows, r1,
                       [&](const matmul_weight& piece, int64_t first_row, int64_t a, int64_t b) {
                           const int64_t pa = a / k_panel_rows, pb = (b + k_panel_rows - 1) / k_panel_rows;
                           if (quantized && avx512) {
                               q8_panels_product_avx512(piece, xq, n_tokens, y + first_row, w.n_out, pa, pb);
                           } else if (quantized) {
                               q8_panels_product_avx2(piece, xq, n_tokens, y + first_row, w.n_out, pa, pb);
                           } else {
                               q8_panels_float_act_avx512(piece, xf, n_tokens, y + first_row, w.n_out, pa, pb);
                           }
                       });
    };
    // Small products run on the calling thread: the hand-over to a worker would cost more than the work.
    constexpr int64_t k_inline_macs = 32 * 1024;
    const bool inline_call = w.n_out * w.n_in * n_tokens < k_inline_macs;
    if (n_tokens >= 8 && !inline_call) {
        parallel_for(n_tokens, prepare);
    } else {
        prepare(0, n_tokens);
    }
    if (inline_call) {
        product(0, g.n_panels);
    } else if (streamer && n_tokens <= k_max_streamed_tokens) {
        stream_rows(streamer, w, k_panel_rows, streamed_grain(static_cast<int64_t>(g.panel_bytes)), product);
    } else {
        parallel_for(g.n_panels, product);
    }
}

}  // namespace detail

bool q8_panels_supported(ggml_type type, activation_recipe recipe) {
    if (!detail::is_panel_type(type)) return false;
    switch (active_level()) {
        case dispatch_level::avx512:
            return true;  // both recipes have panel kernels
        case dispatch_level::avx2:
            return recipe == activation_recipe::quantized;  // the float-activation recipe keeps the row kernels
        default:
            return false;
    }
}

size_t q8_panels_bytes(const matmul_weight& w) {
    const detail::q8_panel_geometry g = detail::q8_panel_geometry_of(w.type, w.n_in, w.n_out);
    return static_cast<size_t>(g.n_panels) * g.panel_bytes;
}

panel_codes pack_q8_panels(const matmul_weight& w, void* dst, thread_pool* pool) {
    const panel_codes codes = active_level() == dispatch_level::avx512 ? panel_codes::plus_128 : panel_codes::as_is;
    pack_q8_panels(w, dst, pool, codes);
    return codes;
}

void pack_q8_panels(const matmul_weight& w, void* dst, thread_pool* pool, panel_codes codes) {
    TROUPE_ASSERT(reinterpret_cast<uintptr_t>(dst) % 64 == 0, "pack_q8_panels: dst is not 64-byte aligned");
    const detail::q8_panel_geometry g = detail::q8_panel_geometry_of(w.type, w.n_in, w.n_out);
    auto* out = static_cast<uint8_t*>(dst);
    const auto pack = [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
            uint8_t* panel = out + static_cast<size_t>(p) * g.panel_bytes;
            std::memset(panel, 0, g.panel_bytes);
            detail::pack_panel(w, g, p, codes, panel);
        }
    };
    if (pool != nullptr) {
        pool->parallel_for(g.n_panels, pack);
    } else {
        pack(0, g.n_panels);
    }
}

}  // namespace troupe::cpu
