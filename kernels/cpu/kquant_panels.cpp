// Packing of Q4_K / Q6_K weights into k-quant panels (layout in kquant_panels.h). Runs once at load, in portable C++.
#include "kernels/cpu/kquant_panels.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/result.h"
#include "kernels/cpu/cpu_features.h"

namespace troupe::cpu {
namespace {

size_t block_bytes_of(ggml_type type) {
    return row_bytes(type, qk_k);
}

size_t group_bytes_of(const matmul_weight& w) {
    return static_cast<size_t>(kquant_group_rows * (w.n_in / qk_k)) * block_bytes_of(w.type);
}

void check_type(const matmul_weight& w) {
    TROUPE_ASSERT(is_k_quant(w.type), "k-quant panels: weight type " + std::string(traits(w.type).name) +
                                          " has no k-quant panel form (Q2_K .. Q6_K only)");
    TROUPE_ASSERT(w.n_in % qk_k == 0, "k-quant panels: n_in " + std::to_string(w.n_in) + " is not a multiple of 256");
}

}  // namespace

bool kquant_panels_supported(ggml_type type, activation_recipe recipe) {
    return is_k_quant(type) && recipe == activation_recipe::quantized && active_level() == dispatch_level::avx512;
}

size_t kquant_panel_bytes(const matmul_weight& w) {
    check_type(w);
    return (static_cast<size_t>(kquant_panel_rows / kquant_group_rows) * group_bytes_of(w) + 63) / 64 * 64;
}

size_t kquant_panels_bytes(const matmul_weight& w) {
    const int64_t n_panels = (w.n_out + kquant_panel_rows - 1) / kquant_panel_rows;
    return static_cast<size_t>(n_panels) * kquant_panel_bytes(w);
}

void pack_kquant_panels(const matmul_weight& w, void* dst, thread_pool* pool) {
    TROUPE_ASSERT(reinterpret_cast<uintptr_t>(dst) % 64 == 0, "pack_kquant_panels: dst is not 64-byte aligned");
    const size_t panel_bytes = kquant_panel_bytes(w), bytes = block_bytes_of(w.type);
    const int64_t nb = w.n_in / qk_k, n_panels = (w.n_out + kquant_panel_rows - 1) / kquant_panel_rows;
    matmul_weight packed = w;  // where kquant_view finds each row once dst holds the panels
    packed.panels = dst;
    const kquant_rows_view to = kquant_view(packed);
    const auto pack = [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
            auto* panel = static_cast<uint8_t*>(dst) + static_cast<size_t>(p) * panel_bytes;
            std::memset(panel, 0, panel_bytes);  // padding rows stay zero blocks
            const int64_t r_end = std::min(w.n_out, (p + 1) * kquant_panel_rows);
            for (int64_t r = p * kquant_panel_rows; r < r_end; ++r) {
                const auto* src = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * w.row_stride;
                uint8_t* row = static_cast<uint8_t*>(dst) + to.offset(r);
                for (int64_t b = 0; b < nb; ++b) std::memcpy(row + b * to.block_step, src + b * bytes, bytes);
            }
        }
    };
    if (pool != nullptr) {
        pool->parallel_for(n_panels, pack);
    } else {
        pack(0, n_panels);
    }
}

kquant_rows_view kquant_view(const matmul_weight& w) {
    const size_t bytes = block_bytes_of(w.type);
    if (w.panels == nullptr) return {static_cast<const uint8_t*>(w.data), w.row_stride, bytes, 0, 0};
    return {static_cast<const uint8_t*>(w.panels), bytes, kquant_group_rows * bytes, group_bytes_of(w),
            kquant_panel_bytes(w)};
}

}  // namespace troupe::cpu
