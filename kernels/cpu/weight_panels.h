// The forms a loader packs weights into where the active level's kernels read them faster than the file's rows: q8
// panels (Q8_0 / Q4_0, q8_panels.h) and k-quant panels (Q2_K .. Q6_K, kquant_panels.h). Both come in panels of
// weight_panel_rows rows, so a thread's shard or a concatenated part starts a panel in either, and both leave the
// file's rows valid (matmul_weight::data) for the kernels that read rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ggml_types.h"
#include "kernels/ref/ops.h"

namespace troupe::cpu {

constexpr int64_t weight_panel_rows = 16;

// Whether weights of this type are packed for this recipe at the active dispatch level.
bool panels_supported(ggml_type type, activation_recipe recipe);

// Bytes of w's panel form (a multiple of 64); panels_supported(w.type, ...) must hold.
size_t panels_bytes(const matmul_weight& w);

// Writes w's panel form to dst (panels_bytes(w) bytes, 64-byte aligned), split over pool when not null; returns the
// codes for matmul_weight::codes (q8 panels: the form the active level reads fastest; k-quant panels: unchanged
// blocks, reported as the default).
[[nodiscard]] panel_codes pack_panels(const matmul_weight& w, void* dst, thread_pool* pool);

}  // namespace troupe::cpu
