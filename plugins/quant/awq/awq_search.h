// AWQ (Lin et al., 2023): activation-aware scaling of a group's input channels before rounding. Channels whose
// inputs are large matter most to the output; scaling their weights up by s (and their inputs down by s, folded
// into what produces the input) gives them finer steps of the grid:
//
//   s(α) = mean|x|^α, normalized by sqrt(max · min)          α on a grid in [0, 1] (α = 0: s = 1)
//   error(α) = Σ over the group's weights of ||(Q(W·diag(s))·diag(1/s) - W) X||²
//   keep the α with the least error (measured on at most 2048 evenly spaced rows of each weight); Q is round to nearest
//   with a clipping search per block (the range shrunk by factors down to 0.5), during the search weighted by E[x²] /
//   s² per weight
//
// then AWQ's clipping search proper for the written blocks: per block, the shrink with the least output error
// e_bᵀ·E[x_b x_bᵀ]·e_b (e_b the block's error, in the unscaled space).
//
// The output error is measured over all calibration rows through the Gram matrix E[x xᵀ] where the input is
// narrow enough to keep it (width <= n_samples, where it also costs less than the samples), else over a uniform
// sample of rows.
//
// Without input scales (nothing precedes the input that could absorb s) the search is over clipping only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "plugins/common/quant_codec.h"

namespace troupe::awq {

struct search_options {
    int n_grid = 20;   // α = 0, 1 / n_grid, ..., 1
    bool clip = true;  // clipping search per block
};

// Calibration statistics of one input, as means over the calibration rows.
struct input_stats {
    static constexpr int64_t k_block = 256;  // the block-diagonal Gram's blocks (a multiple of every codec's)
    int64_t width = 0;
    std::vector<double> mean_abs;    // [width] E|x|
    std::vector<double> mean_sq;     // [width] E[x²]
    std::vector<double> block_gram;  // [width, k_block] E[x_i x_j] for j in i's block of 256: row i, column j % 256
    std::vector<double> gram;        // [width, width] E[x xᵀ], or empty (then samples)
    std::vector<float> samples;      // [n_samples, width] rows for measuring the output error, or empty
};

// One weight of the group: w [n_out, n_in] float, written as codec c.
struct weight_ref {
    const float* w;
    int64_t n_out;
    const quant_common::codec* c;
};

// Runs f(begin, end) over [0, n), possibly in parallel; false when it could not.
using parallel_rows = std::function<bool(int64_t n, const std::function<void(int64_t, int64_t)>& f)>;

// The input scales s [n_in] with the least output error (all 1 when !scale_inputs), and that error in *error.
std::vector<float> search_scales(const std::vector<weight_ref>& weights, const input_stats& stats, bool scale_inputs,
                                 const search_options& options, const parallel_rows& parallel, double* error);

// Writes rows [begin, end) of w·diag(s) quantized (with the clipping search when options.clip) into out.
void quantize_rows(const weight_ref& weight, const input_stats& stats, const std::vector<float>& s,
                   const search_options& options, int64_t begin, int64_t end, void* out, size_t row_bytes);

}  // namespace troupe::awq
