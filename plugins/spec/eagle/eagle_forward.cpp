#include "eagle_forward.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "plugins/common/dense_ops.h"
#include "plugins/common/plugin_support.h"

namespace troupe::eagle {

using spec_common::dot;
using spec_common::matmul;

size_t eagle_weights::n_bytes() const {
    size_t n = 0;
    for (const spec_common::packed_matrix* m : {&fc_w, &wq, &wk, &wv, &wo, &w_gate, &w_up, &w_down, &output})
        n += m->n_bytes();
    return n;
}

void eagle_cache::reserve_rows(int32_t rows, int32_t kv_width) {
    const auto need = static_cast<size_t>(rows) * static_cast<size_t>(kv_width);
    if (k.size() >= need) return;
    const size_t grown = std::max(need, k.size() * 2);
    k.resize(grown);
    v.resize(grown);
}

// The angles as troupe's graph computes them (kernels/cpu/row_ops.cpp rope_angles): in double, reduced to
// [-pi, pi], then the float sine and cosine; pairs (2i, 2i + 1) of the first rope_dims of each head.
void eagle_forward::rope(float* x, int64_t n, int32_t n_heads, const std::vector<eagle_row>& rows) const {
    const int32_t half = s_.rope_dims / 2;
    constexpr double two_pi = 2.0 * std::numbers::pi;
    std::vector<float> cs(static_cast<size_t>(2 * half));  // [half, (cos, sin)]
    for (int64_t r = 0; r < n; ++r) {
        for (int32_t i = 0; i < half; ++i) {
            const double inv_freq =
                double{s_.rope_scale} * std::pow(double{s_.rope_base}, -2.0 * i / static_cast<double>(s_.rope_dims));
            double theta = rows[static_cast<size_t>(r)].position * inv_freq;
            theta -= two_pi * std::nearbyint(theta / two_pi);
            cs[2 * i] = std::cos(static_cast<float>(theta));
            cs[2 * i + 1] = std::sin(static_cast<float>(theta));
        }
        for (int32_t h = 0; h < n_heads; ++h) {
            float* v = x + (r * n_heads + h) * s_.head_dim;
            for (int32_t i = 0; i < half; ++i) {
                const float x0 = v[2 * i], x1 = v[2 * i + 1], co = cs[2 * i], si = cs[2 * i + 1];
                v[2 * i] = x0 * co - x1 * si;
                v[2 * i + 1] = x0 * si + x1 * co;
            }
        }
    }
}

int32_t eagle_forward::attend(const std::vector<eagle_row>& rows, const troupe_parallel* parallel) {
    const int32_t hd = s_.head_dim, qw = s_.q_width(), kvw = s_.kv_width();
    const int32_t group = s_.n_heads / s_.n_kv_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const auto n = static_cast<int64_t>(rows.size());
    int64_t work = 0;  // multiply-adds of the scores and the weighted sums
    for (const eagle_row& row : rows) work += 2 * (row.n_prefix + static_cast<int64_t>(row.extra.size()) + 1) * qw;
    // Small attention runs inline: waking the workers would cost more.
    const troupe_parallel* where = work < (int64_t{1} << 18) ? nullptr : parallel;
    return plugin_support::run_parallel(where, n * s_.n_heads, [&](int64_t begin, int64_t end) {
        std::vector<int32_t> visible;
        std::vector<float> p;
        for (int64_t item = begin; item < end; ++item) {
            const int64_t r = item / s_.n_heads;
            const int32_t h = static_cast<int32_t>(item % s_.n_heads);
            const eagle_row& row = rows[static_cast<size_t>(r)];
            visible.clear();
            for (int32_t j = 0; j < row.n_prefix; ++j) visible.push_back(j);
            visible.insert(visible.end(), row.extra.begin(), row.extra.end());
            visible.push_back(row.slot);
            const float* q = q_.data() + r * qw + h * hd;
            const int32_t kvh = h / group;
            p.resize(visible.size());
            float max = -INFINITY;
            for (size_t j = 0; j < visible.size(); ++j) {
                const float* k = row.cache->k.data() + static_cast<int64_t>(visible[j]) * kvw + kvh * hd;
                p[j] = dot(q, k, hd) * scale;
                max = std::max(max, p[j]);
            }
            float sum = 0;
            for (float& x : p) {
                x = std::exp(x - max);
                sum += x;
            }
            float* o = a_.data() + r * qw + h * hd;
            std::fill(o, o + hd, 0.0f);
            for (size_t j = 0; j < visible.size(); ++j) {
                const float w = p[j] / sum;
                const float* v = row.cache->v.data() + static_cast<int64_t>(visible[j]) * kvw + kvh * hd;
                for (int32_t d = 0; d < hd; ++d) o[d] += w * v[d];
            }
        }
    });
}

int32_t eagle_forward::run(const std::vector<eagle_row>& rows, float* g, float* logits,
                           const troupe_parallel* parallel) {
    const auto n = static_cast<int64_t>(rows.size());
    if (n == 0) return TROUPE_OK;
    const int64_t d = s_.dim, qw = s_.q_width(), kvw = s_.kv_width(), ff = s_.ffn_dim;
    in_.resize(static_cast<size_t>(n * 2 * d));
    for (int64_t r = 0; r < n; ++r) {
        const eagle_row& row = rows[static_cast<size_t>(r)];
        std::copy_n(w_.token_embd + static_cast<int64_t>(row.token) * d, d, in_.data() + r * 2 * d);
        std::copy_n(row.feature, d, in_.data() + r * 2 * d + d);
    }
    x_.resize(static_cast<size_t>(n * d));
    q_.resize(static_cast<size_t>(n * qw));
    k_.resize(static_cast<size_t>(n * kvw));
    v_.resize(static_cast<size_t>(n * kvw));
    int32_t rc = matmul(parallel, in_.data(), n, w_.fc_w, w_.fc_b, x_.data());
    if (rc == TROUPE_OK) {
        rc = spec_common::matmul_shared_input(parallel, x_.data(), n,
                                              {{&w_.wq, q_.data()}, {&w_.wk, k_.data()}, {&w_.wv, v_.data()}});
    }
    if (rc != TROUPE_OK) return rc;
    rope(q_.data(), n, s_.n_heads, rows);
    rope(k_.data(), n, s_.n_kv_heads, rows);
    for (int64_t r = 0; r < n; ++r) {
        const eagle_row& row = rows[static_cast<size_t>(r)];
        std::copy_n(k_.data() + r * kvw, kvw, row.cache->k.data() + static_cast<int64_t>(row.slot) * kvw);
        std::copy_n(v_.data() + r * kvw, kvw, row.cache->v.data() + static_cast<int64_t>(row.slot) * kvw);
    }
    a_.resize(static_cast<size_t>(n * qw));
    if ((rc = attend(rows, parallel)) != TROUPE_OK) return rc;
    h1_.resize(static_cast<size_t>(n * d));
    if ((rc = matmul(parallel, a_.data(), n, w_.wo, nullptr, h1_.data())) != TROUPE_OK) return rc;
    for (int64_t i = 0; i < n * d; ++i) h1_[i] += x_[i];
    n1_.resize(static_cast<size_t>(n * d));
    spec_common::rmsnorm(h1_.data(), w_.ffn_norm, n1_.data(), n, d, s_.rms_eps);
    gate_.resize(static_cast<size_t>(n * ff));
    up_.resize(static_cast<size_t>(n * ff));
    rc =
        spec_common::matmul_shared_input(parallel, n1_.data(), n, {{&w_.w_gate, gate_.data()}, {&w_.w_up, up_.data()}});
    if (rc != TROUPE_OK) return rc;
    for (int64_t i = 0; i < n * ff; ++i) gate_[i] = spec_common::silu(gate_[i]) * up_[i];
    if ((rc = matmul(parallel, gate_.data(), n, w_.w_down, nullptr, g)) != TROUPE_OK) return rc;
    for (int64_t i = 0; i < n * d; ++i) g[i] += h1_[i];
    // The draft logits of the rows that want them.
    f_.clear();
    for (int64_t r = 0; r < n; ++r) {
        if (!rows[static_cast<size_t>(r)].want_logits) continue;
        const size_t at = f_.size();
        f_.resize(at + static_cast<size_t>(d));
        spec_common::rmsnorm(g + r * d, w_.output_norm, f_.data() + at, 1, d, s_.rms_eps);
    }
    const auto n_wanted = static_cast<int64_t>(f_.size()) / d;
    return matmul(parallel, f_.data(), n_wanted, w_.output, nullptr, logits);
}

}  // namespace troupe::eagle
