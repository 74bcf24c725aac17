// AWQ's search (see awq_search.h).
#include "plugins/quant/awq/awq_search.h"

#include <algorithm>
#include <cmath>

namespace troupe::awq {
namespace {

using quant_common::block_grid;
using quant_common::codec;

constexpr int64_t k_search_rows = 2048;  // rows of a weight the α search measures

// Σ a[i] b[i] in four independent sums (so the compiler can keep them in vector lanes).
template <class T>
double dot(const T* a, const double* b, int64_t n) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; ++i) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

// s(α) = max(mean|x|, floor)^α / sqrt(max · min); the floor (1e-4 of the largest mean) keeps dead channels finite.
std::vector<float> scales_for(double alpha, const input_stats& stats) {
    const int64_t n = stats.width;
    std::vector<float> s(static_cast<size_t>(n), 1.0f);
    const double largest = *std::max_element(stats.mean_abs.begin(), stats.mean_abs.end());
    if (!(largest > 0.0) || alpha == 0.0) return s;
    double lo = 0.0, hi = 0.0;
    std::vector<double> raw(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        raw[i] = std::pow(std::max(stats.mean_abs[i], 1e-4 * largest), alpha);
        lo = i == 0 ? raw[i] : std::min(lo, raw[i]);
        hi = std::max(hi, raw[i]);
    }
    const double norm = std::sqrt(lo * hi);
    for (int64_t i = 0; i < n; ++i) s[i] = static_cast<float>(raw[i] / norm);
    return s;
}

// The clipping search's weights in the scaled space: an error e_i of (w·s)_i changes the output by e_i x_i / s_i.
std::vector<float> importance_for(const input_stats& stats, const std::vector<float>& s) {
    std::vector<float> imp(s.size());
    for (size_t i = 0; i < s.size(); ++i)
        imp[i] = static_cast<float>(stats.mean_sq[i] / (static_cast<double>(s[i]) * s[i]));
    return imp;
}

enum class clip_by {
    none,        // the block's full range
    diagonal,    // the clipping search, each weight's error weighted by E[x²] / s² (the α search's, cheap)
    block_gram,  // the clipping search by the block's output error e_bᵀ E[x_b x_bᵀ] e_b (AWQ's auto_clip)
};

// The α search clips by the cheap diagonal weights (clipping it by the blocks' output error instead gave no better
// perplexity on stories260K: Q4_0 17.64 vs 17.58, Q4_1 16.92 vs 17.06).
clip_by search_clip(const search_options& options) {
    return options.clip ? clip_by::diagonal : clip_by::none;
}

// Quantizes one row w [n_in] as w·diag(s), each block's grid chosen as `clip` says: the values the model computes
// with (dequantized, divided by s) into y and the blocks into out, each when not null. scaled: [n_in] scratch;
// importance: [n_in] E[x²] / s² (clip_by::diagonal's weights; Q4_K's weighted fit's under clip_by::block_gram).
void quantize_row(const codec& c, const float* w, const std::vector<float>& s, const input_stats& stats,
                  const std::vector<float>& importance, clip_by clip, float* scaled, float* y, uint8_t* out) {
    const int64_t n = static_cast<int64_t>(s.size());
    const int bs = c.block_size();
    const int64_t kb = input_stats::k_block;
    for (int64_t i = 0; i < n; ++i) scaled[i] = w[i] * s[i];
    int8_t q[256];  // [block_size]
    float v[256];   // [block_size]
    double e[256];  // [block_size] error of the unscaled weights
    for (int64_t b = 0; b < n / bs; ++b) {
        const int64_t col0 = b * bs;
        const float* xb = scaled + col0;
        // ||e_b X_b||² = e_bᵀ E[x_b x_bᵀ] e_b, the block's part of the output error.
        auto block_output_error = [&](const block_grid& g) {
            quant_common::quantize_block(c, g, xb, q, v);
            for (int j = 0; j < bs; ++j) e[j] = static_cast<double>(v[j]) / s[col0 + j] - w[col0 + j];
            double err = 0.0;
            for (int i = 0; i < bs; ++i)
                err += e[i] * dot(stats.block_gram.data() + (col0 + i) * kb + col0 % kb, e, bs);
            return err;
        };
        block_grid best;
        if (clip == clip_by::diagonal) {
            best = quant_common::fit_clipped(c, xb, importance.data() + col0);
        } else {
            best = c.fit(xb);
            if (clip == clip_by::block_gram) {
                double best_err = block_output_error(best);
                auto consider = [&](const block_grid& g) {
                    const double err = block_output_error(g);
                    if (err < best_err) {
                        best_err = err;
                        best = g;
                    }
                };
                quant_common::for_each_grid_candidate(c, xb, importance.data() + col0, 20, 0.5f, consider);
            }
        }
        quant_common::quantize_block(c, best, xb, q, v);
        if (y != nullptr) {
            for (int j = 0; j < bs; ++j) y[col0 + j] = v[j] / s[col0 + j];
        }
        if (out != nullptr) c.write(best, q, out + static_cast<size_t>(b) * c.block_bytes());
    }
}

// Σ over the weights' rows of ||(Q(W·diag(s))·diag(1/s) - W) X||² (through the Gram matrix, or over the samples);
// negative when the parallel runner failed.
double output_error(const std::vector<weight_ref>& weights, const input_stats& stats, const std::vector<float>& s,
                    const search_options& options, const parallel_rows& parallel) {
    const int64_t n = stats.width;
    const int64_t n_samples = static_cast<int64_t>(stats.samples.size()) / n;
    const std::vector<float> importance = importance_for(stats, s);
    double total = 0.0;
    for (const weight_ref& wr : weights) {
        // At most k_search_rows rows, evenly spaced, stand for the weight (the output matrix has tens of thousands).
        const int64_t n_rows = std::min(wr.n_out, k_search_rows);
        std::vector<double> row_error(static_cast<size_t>(n_rows));  // [n_rows]
        const bool ok = parallel(n_rows, [&](int64_t begin, int64_t end) {
            std::vector<float> scaled(static_cast<size_t>(n)), diff(static_cast<size_t>(n));  // [n_in]
            std::vector<double> d(static_cast<size_t>(n));                                    // [n_in]
            for (int64_t r = begin; r < end; ++r) {
                const float* w = wr.w + r * wr.n_out / n_rows * n;
                quantize_row(*wr.c, w, s, stats, importance, search_clip(options), scaled.data(), diff.data(), nullptr);
                for (int64_t i = 0; i < n; ++i) diff[i] -= w[i];
                for (int64_t i = 0; i < n; ++i) d[i] = diff[i];
                double err = 0.0;
                if (!stats.gram.empty()) {
                    for (int64_t i = 0; i < n; ++i) err += d[i] * dot(stats.gram.data() + i * n, d.data(), n);
                }
                for (int64_t t = 0; t < n_samples; ++t) {
                    const double y = dot(stats.samples.data() + t * n, d.data(), n);
                    err += y * y;
                }
                row_error[r] = err;
            }
        });
        if (!ok) return -1.0;
        double sum = 0.0;
        for (double e : row_error) sum += e;
        total += sum * static_cast<double>(wr.n_out) / static_cast<double>(n_rows);
    }
    return total;
}

}  // namespace

std::vector<float> search_scales(const std::vector<weight_ref>& weights, const input_stats& stats, bool scale_inputs,
                                 const search_options& options, const parallel_rows& parallel, double* error) {
    std::vector<float> best = scales_for(0.0, stats);
    double best_error = output_error(weights, stats, best, options, parallel);
    if (scale_inputs) {
        for (int k = 1; k <= options.n_grid && best_error >= 0.0; ++k) {
            const std::vector<float> s = scales_for(static_cast<double>(k) / options.n_grid, stats);
            const double err = output_error(weights, stats, s, options, parallel);
            if (err < 0.0) {
                best_error = err;
            } else if (err < best_error) {
                best_error = err;
                best = s;
            }
        }
    }
    *error = best_error;
    return best;
}

void quantize_rows(const weight_ref& weight, const input_stats& stats, const std::vector<float>& s,
                   const search_options& options, int64_t begin, int64_t end, void* out, size_t row_bytes) {
    const int64_t n = stats.width;
    const std::vector<float> importance = importance_for(stats, s);
    std::vector<float> scaled(static_cast<size_t>(n));  // [n_in]
    for (int64_t r = begin; r < end; ++r) {
        quantize_row(*weight.c, weight.w + r * n, s, stats, importance,
                     options.clip ? clip_by::block_gram : clip_by::none, scaled.data(), nullptr,
                     static_cast<uint8_t*>(out) + static_cast<size_t>(r) * row_bytes);
    }
}

}  // namespace troupe::awq
