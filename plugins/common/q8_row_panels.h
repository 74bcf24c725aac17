// q8_row_panels: 8-bit rows of packed_matrix stored 16 rows to a panel for AVX-512 VNNI, so that one vpdpbusd serves
// 16 rows (each lane a row) against 4 activation bytes broadcast: per block of 32 weights and token, 8 vpdpbusd, one
// conversion and one FMA by the block's activation scale, and no horizontal sum. A row-major row took a conversion,
// an FMA and a scale load per 64 weights plus a horizontal sum per output (the grown 110M's EAGLE layer: ~0.2 ms of
// arithmetic a row on one Zen 4 core, the layer's whole read from memory ~0.15 ms).
//
//   panel p, block b (32 columns), quad q (4 columns): 64 bytes, row p·16 + l at bytes 4l..4l+3 = codes + 128 of
//   columns 32b + 4q .. 32b + 4q + 3 (unsigned, as vpdpbusd takes them; rows past the matrix are zero)
//
//   y[t][r] = (Σ_b xs[t][b] · Σ_{i in b} (w + 128)_ri · xq[t][i]  -  offset[t]) · scale[r]  (+ bias[r])
//
// offset[t] = 128 · Σ_b xs[t][b] · Σ_{i in b} xq[t][i] (q8_activations::offset) takes the 128 out again.
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe::spec_common::q8_row_panels {

constexpr int64_t k_rows = 16;

constexpr int64_t n_panels(int64_t n_rows) {
    return (n_rows + k_rows - 1) / k_rows;
}
constexpr size_t panel_bytes(int64_t n_cols) {
    return static_cast<size_t>(n_cols) * k_rows;
}

// The panels of signed codes [n_rows][n_cols] (n_cols a multiple of 32) into dst (n_panels · panel_bytes bytes).
void pack(const int8_t* codes, int64_t n_rows, int64_t n_cols, uint8_t* dst);

// The signed code of row r, column i.
int code(const uint8_t* panels, int64_t n_cols, int64_t r, int64_t i);

// Rows [16 p, 16 p + n_valid) of n_tok tokens (xq [n_tok][n_cols], xs [n_tok][n_cols / 32], offset [n_tok]) into
// y[t · ldy + l] for row 16 p + l (y: the panel's first output); row_scales and bias (may be null) are the whole
// matrix's. AVX-512 VNNI only: the caller checks the CPU.
void product(const uint8_t* panels, int64_t n_cols, int64_t p, int n_valid, const int8_t* xq, const float* xs,
             const float* offset, int64_t n_tok, const float* row_scales, const float* bias, float* y, int64_t ldy);

}  // namespace troupe::spec_common::q8_row_panels
