// GPTQ (Frantar et al., 2022): quantizes a weight W [n_out, n_in] column by column, each column's rounding error
// spread over the columns not yet quantized in proportion to the inverse Hessian of the layer's squared output
// error, H = 2 X Xᵀ over the calibration inputs X [n_in, n_tokens]:
//
//   U = upper Cholesky factor of H⁻¹ (H⁻¹ = Uᵀ U), after dampening and with dead inputs (H_ii = 0) fixed
//   for each column k (in act order: by decreasing H_kk):
//       q_k = quantize(w_k) on the grid of its group;  e = (w_k - q_k) / U_kk;  w_c -= e · U_kc  for c > k
//
// The rows are independent given U, so the work splits over rows; the updates are applied lazily, in blocks of
// block_size columns (within a block at once, to the columns after it once per block, for a tile of rows). Without
// act order a group's grid is chosen when the group starts, from the updated weights; with act order the grids
// are chosen from the original weights beforehand ("static groups"), so the file stays a standard format.
//
// The clipping search (clip) chooses each group's grid among the full range shrunk by 1, 0.975, ..., 0.5 (Q4_K: its
// reference fit or its fit weighted by H_ii): a static grid by its rounding error of the original weights weighted
// by H_ii; a grid chosen when its group starts (no act order) by GPTQ's own loss over the group's columns, Σ e_k²
// with the compensation inside the group, which is what quantizing those columns adds to the output error given
// the columns before. (Static grids by e_bᵀ H_bb e_b, or act-order grids fit from the updated weights when a
// group's first column comes, gave no better perplexity on stories260K.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plugins/common/quant_codec.h"

namespace troupe::gptq {

struct solver_options {
    double damp = 0.01;    // added to H's diagonal, as a fraction of its mean
    int block_size = 128;  // columns per lazy update
    bool act_order = false;
    bool clip = false;  // choose each group's grid by a clipping search (else the full range)
};

// H prepared for a group of weights sharing one input.
struct prepared_hessian {
    int64_t n_in = 0;
    std::vector<int64_t> order;  // [n_in] the column quantized k-th (identity without act order)
    std::vector<uint8_t> dead;   // [n_in] 1 where the input was always 0 (H_ii = 0): the weight column is zeroed
    std::vector<float> u;        // [n_in, n_in] upper Cholesky factor of H⁻¹, rows and columns in `order`
    std::vector<float> diag;     // [n_in] H_ii in the original column order (the static grids' clipping weights)
    double damp_used = 0.0;      // the fraction of the mean diagonal finally added (raised when H was not definite)
};

// Runs f(begin, end) over [0, n), possibly in parallel; false when it could not.
using parallel_rows = std::function<bool(int64_t n, const std::function<void(int64_t, int64_t)>& f)>;

// h: [n_in, n_in] symmetric (the upper triangle is read). Returns "" or why H could not be factored.
std::string prepare(std::vector<double> h, int64_t n_in, const solver_options& options, const parallel_rows& parallel,
                    prepared_hessian* out);

// Quantizes rows [begin, end) of w [n_out, n_in] into `out` ([n_out] rows of row_bytes bytes) in codec c.
void quantize_rows(const quant_common::codec& c, const prepared_hessian& h, const solver_options& options,
                   const float* w, int64_t begin, int64_t end, void* out, size_t row_bytes);

}  // namespace troupe::gptq
