// GPTQ's solver (see gptq_solver.h): the Hessian's factorization in double precision, then the column loop over
// tiles of rows in float, as the reference implementation does on the GPU.
#include "plugins/quant/gptq/gptq_solver.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace troupe::gptq {
namespace {

using quant_common::block_grid;
using quant_common::codec;

// a [n, n] = L Lᵀ in place (L in the lower triangle, the upper zeroed); false when a is not positive definite.
// Left-looking: column j from the columns before it, its rows below the diagonal split over `parallel`.
bool cholesky_lower(std::vector<double>& a, int64_t n, const parallel_rows& parallel) {
    for (int64_t j = 0; j < n; ++j) {
        const double* lj = a.data() + j * n;
        double d = lj[j];
        for (int64_t k = 0; k < j; ++k) d -= lj[k] * lj[k];
        if (!(d > 0.0) || !std::isfinite(d)) return false;
        const double l_jj = std::sqrt(d);
        a[j * n + j] = l_jj;
        auto below = [&](int64_t begin, int64_t end) {
            for (int64_t i = j + 1 + begin; i < j + 1 + end; ++i) {
                const double* li = a.data() + i * n;
                double s0 = 0.0, s1 = 0.0;
                int64_t k = 0;
                for (; k + 2 <= j; k += 2) {
                    s0 += li[k] * lj[k];
                    s1 += li[k + 1] * lj[k + 1];
                }
                if (k < j) s0 += li[k] * lj[k];
                a[i * n + j] = (li[j] - (s0 + s1)) / l_jj;
            }
        };
        // Split only where the column has enough work to pay for the workers.
        if ((n - j - 1) * j >= 65536) {
            if (!parallel(n - j - 1, below)) return false;
        } else {
            below(0, n - j - 1);
        }
    }
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = i + 1; j < n; ++j) a[i * n + j] = 0.0;
    }
    return true;
}

// The inverse X of the lower triangular l [n, n] (lower triangular too), from L X = I row by row:
// X[i, :] = (e_i - Σ_{k<i} L[i, k] X[k, :]) / L[i, i]. Each range of `parallel` owns blocks of 64 columns (the block
// j and its mirror from the end, so the ranges balance) and reads rows of X and L contiguously.
bool invert_lower(const std::vector<double>& l, int64_t n, const parallel_rows& parallel, std::vector<double>& x) {
    constexpr int64_t cols = 64;
    const int64_t n_blocks = (n + cols - 1) / cols;
    x.assign(static_cast<size_t>(n * n), 0.0);  // [n, n]
    auto block = [&](int64_t b) {
        const int64_t j0 = b * cols, j1 = std::min(n, j0 + cols);
        double acc[cols];
        for (int64_t i = j0; i < n; ++i) {
            std::fill(acc, acc + cols, 0.0);
            const double* li = l.data() + i * n;
            for (int64_t k = j0; k < i; ++k) {
                const double a = li[k];
                const double* xk = x.data() + k * n;
                for (int64_t j = j0; j < j1; ++j) acc[j - j0] += a * xk[j];
            }
            double* xi = x.data() + i * n;
            for (int64_t j = j0; j < std::min(j1, i + 1); ++j) xi[j] = ((i == j ? 1.0 : 0.0) - acc[j - j0]) / li[i];
        }
    };
    return parallel((n_blocks + 1) / 2, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
            block(b);
            if (n_blocks - 1 - b != b) block(n_blocks - 1 - b);
        }
    });
}

// A grid for the group starting at column k (identity order) of the updated row w: the candidate with the least
// GPTQ loss Σ e_j² over the group's columns, compensating inside the group as the column loop will.
block_grid fit_in_loop(const codec& c, const prepared_hessian& h, const float* w, int64_t k) {
    const int bs = c.block_size();
    const int64_t n = h.n_in;
    float x[256];  // [block_size]
    block_grid best;
    double best_err = -1.0;
    quant_common::for_each_grid_candidate(c, w + k, h.diag.data() + k, 20, 0.5f, [&](const block_grid& g) {
        std::copy(w + k, w + k + bs, x);
        double err = 0.0;
        for (int j = 0; j < bs; ++j) {
            const float* urow = h.u.data() + (k + j) * n + k;
            const float e = (x[j] - c.value(g, j, c.code(g, j, x[j]))) / urow[j];
            err += static_cast<double>(e) * e;
            for (int jj = j + 1; jj < bs; ++jj) x[jj] -= e * urow[jj];
        }
        if (best_err < 0.0 || err < best_err) {
            best_err = err;
            best = g;
        }
    });
    return best;
}

}  // namespace

std::string prepare(std::vector<double> h, int64_t n_in, const solver_options& options, const parallel_rows& parallel,
                    prepared_hessian* out) {
    const int64_t n = n_in;
    out->n_in = n;
    out->dead.assign(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = i + 1; j < n; ++j) h[j * n + i] = h[i * n + j];
    }
    double mean_diag = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        if (h[i * n + i] == 0.0) {
            out->dead[i] = 1;
            h[i * n + i] = 1.0;
        }
        mean_diag += h[i * n + i];
    }
    mean_diag /= static_cast<double>(n);
    out->diag.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out->diag[i] = static_cast<float>(h[i * n + i]);

    out->order.resize(static_cast<size_t>(n));
    std::iota(out->order.begin(), out->order.end(), int64_t{0});
    if (options.act_order) {
        std::stable_sort(out->order.begin(), out->order.end(),
                         [&](int64_t a, int64_t b) { return h[a * n + a] > h[b * n + b]; });
    }
    std::vector<double> hp(static_cast<size_t>(n * n));  // [n, n] H in quantization order
    for (int64_t a = 0; a < n; ++a) {
        for (int64_t b = 0; b < n; ++b) hp[a * n + b] = h[out->order[a] * n + out->order[b]];
    }

    // Dampening: λ = damp · mean(diag H); when H + λI is still not definite (rank-deficient calibration in
    // float rounding), ten times more, a few times.
    //
    // U from one Cholesky factorization and one triangular inverse: with J the order reversal, J H J = L Lᵀ gives
    // H = V Vᵀ with V = J L J upper triangular, so H⁻¹ = V⁻ᵀ V⁻¹ and U = V⁻¹ = J L⁻¹ J.
    std::vector<double> l;
    double damp = options.damp;
    bool factored = false;
    for (int attempt = 0; attempt < 4 && !factored; ++attempt, damp *= 10.0) {
        l.resize(static_cast<size_t>(n * n));
        for (int64_t a = 0; a < n; ++a) {
            for (int64_t b = 0; b < n; ++b) l[a * n + b] = hp[(n - 1 - a) * n + (n - 1 - b)];
            l[a * n + a] += damp * mean_diag;
        }
        factored = cholesky_lower(l, n, parallel);
        if (factored) out->damp_used = damp;
        if (damp == 0.0) break;
    }
    if (!factored) {
        return "the calibration Hessian is not positive definite even with damping " + std::to_string(damp / 10.0) +
               " of its mean diagonal (non-finite calibration inputs?)";
    }
    std::vector<double> x;
    if (!invert_lower(l, n, parallel, x)) return "the host's parallel_for failed";
    out->u.assign(static_cast<size_t>(n * n), 0.0f);
    for (int64_t a = 0; a < n; ++a) {
        for (int64_t b = a; b < n; ++b) out->u[a * n + b] = static_cast<float>(x[(n - 1 - a) * n + (n - 1 - b)]);
    }
    return "";
}

void quantize_rows(const codec& c, const prepared_hessian& h, const solver_options& options, const float* w,
                   int64_t begin, int64_t end, void* out, size_t row_bytes) {
    constexpr int64_t tile = 8;  // rows sharing each read of U
    const int64_t n = h.n_in;
    const int bs = c.block_size();
    const int64_t n_blocks = n / bs;
    // Without act order a group must lie inside one lazy block (its grid is fit from fully updated weights).
    int64_t lazy = std::max<int64_t>(1, options.block_size);
    if (!options.act_order) lazy = (lazy + bs - 1) / bs * bs;

    std::vector<float> wp(static_cast<size_t>(tile * n));                 // [tile, n] the rows in quantization order
    std::vector<float> err(static_cast<size_t>(tile * lazy));             // [tile, lazy] scaled errors of the block
    std::vector<block_grid> grids(static_cast<size_t>(tile * n_blocks));  // [tile, n_blocks]
    std::vector<int8_t> codes(static_cast<size_t>(tile * n));             // [tile, n] in the original column order
    std::vector<float> original(static_cast<size_t>(n));                  // [n]

    for (int64_t r0 = begin; r0 < end; r0 += tile) {
        const int64_t nr = std::min(tile, end - r0);
        for (int64_t r = 0; r < nr; ++r) {
            const float* row = w + (r0 + r) * n;
            for (int64_t i = 0; i < n; ++i) original[i] = h.dead[i] ? 0.0f : row[i];
            for (int64_t k = 0; k < n; ++k) wp[r * n + k] = original[h.order[k]];
            if (options.act_order) {
                for (int64_t b = 0; b < n_blocks; ++b) {
                    const float* x = original.data() + b * bs;
                    grids[r * n_blocks + b] =
                        options.clip ? quant_common::fit_clipped(c, x, h.diag.data() + b * bs) : c.fit(x);
                }
            }
        }
        for (int64_t b0 = 0; b0 < n; b0 += lazy) {
            const int64_t b1 = std::min(n, b0 + lazy);
            for (int64_t k = b0; k < b1; ++k) {
                const int64_t col = h.order[k];
                const int64_t blk = col / bs;
                const int j = static_cast<int>(col % bs);
                const float* urow = h.u.data() + k * n;
                const float u_kk = urow[k];
                for (int64_t r = 0; r < nr; ++r) {
                    float* wr = wp.data() + r * n;
                    block_grid& g = grids[r * n_blocks + blk];
                    if (!options.act_order && j == 0) {  // identity order: k == col
                        g = options.clip ? fit_in_loop(c, h, wr, k) : c.fit(wr + k);
                    }
                    const float x = wr[k];
                    const int q = c.code(g, j, x);
                    codes[r * n + col] = static_cast<int8_t>(q);
                    const float e = (x - c.value(g, j, q)) / u_kk;
                    err[r * lazy + (k - b0)] = e;
                    for (int64_t cc = k + 1; cc < b1; ++cc) wr[cc] -= e * urow[cc];
                }
            }
            for (int64_t k = b0; k < b1; ++k) {
                const float* urow = h.u.data() + k * n;
                for (int64_t r = 0; r < nr; ++r) {
                    const float e = err[r * lazy + (k - b0)];
                    float* wr = wp.data() + r * n;
                    for (int64_t cc = b1; cc < n; ++cc) wr[cc] -= e * urow[cc];
                }
            }
        }
        for (int64_t r = 0; r < nr; ++r) {
            auto* dst = static_cast<uint8_t*>(out) + static_cast<size_t>(r0 + r) * row_bytes;
            for (int64_t b = 0; b < n_blocks; ++b)
                c.write(grids[r * n_blocks + b], codes.data() + r * n + b * bs,
                        dst + static_cast<size_t>(b) * c.block_bytes());
        }
    }
}

}  // namespace troupe::gptq
