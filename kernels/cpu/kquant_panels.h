// K-quant weights (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) re-laid at load into row panels, so that the AVX-512 kernels, which
// take rows in groups of four (kquant_rows_avx512.h), read one contiguous stream instead of four streams a row apart.
//
// Why: a group's four rows are each 1-3 KiB long on a 1B model (2048 or 5632 inputs), so the group's super-blocks
// come from four addresses that far apart; this Zen 5 streams that at ~75% of what it streams from one address
// (troupe_kernels_bench's 110M Q6_K on one thread: 2.82-3.06 -> 2.45-2.55 ms per token with the blocks in group
// order, a quick probe before this form existed). The q8 panels (q8_panels.h) gained for the same reason.
//
// Layout. Panels of 16 rows (kquant_panel_rows, as q8_panel_rows: shards and concatenated parts start a panel), one
// after another, each panel_bytes long (64-byte aligned). A panel holds four groups of four rows; a group holds, for
// each super-block b of the rows, the four rows' blocks b back to back:
//
//   panel p: group 0 (rows 16p .. 16p + 3) | group 1 (rows 16p + 4 ..) | group 2 | group 3 | padding to 64 bytes
//   group:   [row 0 block 0][row 1 block 0][row 2 block 0][row 3 block 0][row 0 block 1] ... [row 3 block nb - 1]
//
// The last panel is padded with zero rows (blocks of zeros: d = 0 (and dmin), products 0, never stored). Blocks are
// copied unchanged, so every product is the rows' product bit for bit (ggml's recipe, kernels/ref/kquant_dot.h).
// The file's rows stay valid too (matmul_weight::data): a kernel without this form reads them.
//
// Which kernels read it: at the AVX-512 level in the quantized recipe, every kernel of these types: the groups of four
// rows (any token count for Q2_K, Q3_K and Q5_K; up to kquant_few_tokens_max for Q4_K and Q6_K), the integer GEMM of
// Q4_K / Q6_K beyond (gemm_kquant_avx512.cpp), and the one-row kernels (row r at kquant_rows_view::row(r), its blocks
// block_step apart). Other levels and the float-activation recipe keep reading rows, so nothing packs there
// (kquant_panels_supported).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ggml_types.h"
#include "kernels/ref/ops.h"

namespace troupe::cpu {

constexpr int64_t kquant_panel_rows = 16;
constexpr int64_t kquant_group_rows = 4;

// Whether this weight type is packed into k-quant panels for this recipe at the active dispatch level (a k-quant,
// quantized recipe, AVX-512 VNNI).
bool kquant_panels_supported(ggml_type type, activation_recipe recipe);

// Bytes of one panel of w (a k-quant; a multiple of 64), and of w's panel form.
size_t kquant_panel_bytes(const matmul_weight& w);
size_t kquant_panels_bytes(const matmul_weight& w);

// Writes the panel form of w's rows to dst (kquant_panels_bytes(w) bytes, 64-byte aligned), panels split over pool
// when it is not null.
void pack_kquant_panels(const matmul_weight& w, void* dst, thread_pool* pool);

// Where a k-quant weight's super-blocks lie, in either form: row r starts at row(r), its block b at row(r) + b *
// block_step; rows 4i .. 4i + 3 (a group) lie row_stride apart from row(4i) in both forms, so a kernel taking a group
// of four rows takes (row(4i), row_stride, block_step).
struct kquant_rows_view {
    const uint8_t* base;
    size_t row_stride;   // rows: the weight's row stride; panels: one block (the rows of a group interleave)
    size_t block_step;   // rows: one block; panels: four blocks
    size_t group_bytes;  // panels only: one group of four rows
    size_t panel_bytes;  // panels only: one panel of 16 rows; 0 for rows
    // Bytes from base to row r's first block.
    size_t offset(int64_t r) const {
        if (panel_bytes == 0) return static_cast<size_t>(r) * row_stride;
        return static_cast<size_t>(r / kquant_panel_rows) * panel_bytes +
               static_cast<size_t>(r % kquant_panel_rows / kquant_group_rows) * group_bytes +
               static_cast<size_t>(r % kquant_group_rows) * row_stride;
    }
    const uint8_t* row(int64_t r) const { return base + offset(r); }
    bool panels() const { return panel_bytes != 0; }
};

// The view of w (a k-quant): its panels where w.panels is set, else its rows.
kquant_rows_view kquant_view(const matmul_weight& w);

}  // namespace troupe::cpu
