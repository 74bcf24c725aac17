// AWQ (Lin et al., 2023): activation-aware scaling of a group's input channels before rounding. Channels whose
// inputs are large matter most to the output; scaling their weights up by s (and their inputs down by s, folded
// into what produces the input) gives them finer steps of the grid:
//
//   s(α) = mean|x|^α, normalized by sqrt(max · min)          α on a grid in [0, 1] (α = 0: s = 1)
//   error(α) = Σ over the group's weights of ||(Q(W·diag(s))·diag(1/s) - W) X||² over the sampled rows X
//   keep the α with the least error; Q is round to nearest with a clipping search per block (the range shrunk
//   by factors down to 0.5, the one with the least error weighted by E[x²] / s² kept)
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

// Calibration statistics of one input.
struct input_stats {
    int64_t width = 0;
    std::vector<double> mean_abs;  // [width] mean |x|
    std::vector<double> mean_sq;   // [width] mean x²
    std::vector<float> samples;    // [n_samples, width] rows for measuring the output error
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
