#include "core/train/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/result.h"

namespace troupe::train {
namespace {

// The O(T²) products run as small matrix products per query row and KV head, vectorized over keys or over
// head_dim in tiles of 16 floats (one AVX-512 register, two AVX2 ones), heads 8 at a time so that each tile of the
// keys' or values' rows is read once for the whole group. The functions below are compiled for x86-64-v4 (AVX-512)
// and v3 (AVX2 + FMA) beside the baseline and picked at load time (target_clones): training does not need the
// inference kernels' bit-for-bit agreement between levels. (Before: a dot and three axpys of head_dim per query
// head and key, 4-6% of the FMA peak; bench_train_attention.)
typedef float v16 __attribute__((vector_size(64)));
// The baseline clone passes v16 in memory where AVX-512 passes it in a register; every function taking or returning
// one is inlined, so no call crosses that difference.
#pragma GCC diagnostic ignored "-Wpsabi"
constexpr int64_t lanes = 16;

[[gnu::always_inline]] inline v16 load16(const float* p) {
    v16 x;
    std::memcpy(&x, p, sizeof x);
    return x;
}

[[gnu::always_inline]] inline void store16(float* p, v16 x) {
    std::memcpy(p, &x, sizeof x);
}

[[gnu::always_inline]] inline float dot(const float* a, const float* b, int64_t n) {
    v16 acc{};
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes) acc += load16(a + i) * load16(b + i);
    float s = 0.0f;
    for (int l = 0; l < lanes; ++l) s += acc[l];
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

[[gnu::always_inline]] inline void axpy(float a, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// out[h, c] (+)= Σ_r a[h·as + r·ar] · b[r, c] for h < H (a block of rows), c in [c0, c0 + 16): the H x 16 tile in
// registers.
template <int H, bool accumulate>
[[gnu::always_inline]] inline void tile16(const float* a, int64_t as, int64_t ar, const float* b, int64_t bs,
                                          int64_t n_r, int64_t c0, float* out, int64_t os) {
    v16 acc[H];
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) acc[h] = accumulate ? load16(out + h * os + c0) : v16{};
    for (int64_t r = 0; r < n_r; ++r) {
        const v16 x = load16(b + r * bs + c0);
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h) acc[h] += a[h * as + r * ar] * x;
    }
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) store16(out + h * os + c0, acc[h]);
}

// out[h, c] (+)= Σ_r a[h·as + r·ar] · b[r, c] for h < n_h, c < n_c: a's rows and reduction index with their strides
// (a matrix or its transpose), b [n_r, n_c] (row stride bs), out [n_h, n_c] (os). Whole tiles of 16 columns in
// registers; the columns past the last whole tile one at a time unless pad_columns, where b and out have room for
// the tile that covers them (its extra columns are written with whatever b holds there).
template <bool accumulate>
[[gnu::always_inline]] inline void product(const float* a, int64_t as, int64_t ar, int64_t n_h, const float* b,
                                           int64_t bs, int64_t n_r, int64_t n_c, float* out, int64_t os,
                                           bool pad_columns) {
    const int64_t whole = pad_columns ? (n_c + lanes - 1) / lanes * lanes : n_c / lanes * lanes;
    for (int64_t c0 = 0; c0 < whole; c0 += lanes) {
        int64_t h = 0;
        for (; h + 8 <= n_h; h += 8) tile16<8, accumulate>(a + h * as, as, ar, b, bs, n_r, c0, out + h * os, os);
        for (; h < n_h; ++h) tile16<1, accumulate>(a + h * as, as, ar, b, bs, n_r, c0, out + h * os, os);
    }
    for (int64_t c = whole; c < n_c; ++c) {
        for (int64_t h = 0; h < n_h; ++h) {
            float sum = accumulate ? out[h * os + c] : 0.0f;
            for (int64_t r = 0; r < n_r; ++r) sum += a[h * as + r * ar] * b[r * bs + c];
            out[h * os + c] = sum;
        }
    }
}

// e^x for x <= 0 in 16 lanes: x = n ln 2 + r, |r| <= ln 2 / 2, e^r by its Taylor polynomial of degree 6 (relative
// error ~2e-7), 2^n in the exponent bits; below -87 it gives ~1e-38 where e^x underflows.
[[gnu::always_inline]] inline v16 exp16(v16 x) {
    typedef int32_t i16 __attribute__((vector_size(64)));
    x = x < -87.0f ? -87.0f : x;
    const v16 n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest
    const v16 r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
    v16 p = 1.0f / 720 + r * 0.0f;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const i16 bits = (__builtin_convertvector(n, i16) + 127) << 23;
    v16 scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

// x[0, n) = e^(x - max x) in place, returning their sum (the softmax before its division).
[[gnu::always_inline]] inline float exp_shifted_sum(float* x, int64_t n) {
    v16 m = v16{} - INFINITY;
    int64_t j = 0;
    for (; j + lanes <= n; j += lanes) {
        const v16 v = load16(x + j);
        m = v > m ? v : m;
    }
    float mx = -INFINITY;
    for (int l = 0; l < lanes; ++l) mx = std::max(mx, m[l]);
    for (; j < n; ++j) mx = std::max(mx, x[j]);
    v16 acc{};
    j = 0;
    for (; j + lanes <= n; j += lanes) {
        const v16 e = exp16(load16(x + j) - mx);
        store16(x + j, e);
        acc += e;
    }
    float sum = 0.0f;
    for (int l = 0; l < lanes; ++l) sum += acc[l];
    for (; j < n; ++j) sum += x[j] = std::exp(x[j] - mx);
    return sum;
}

// A row's visible keys (attention.h, "Passes") as a prefix of the segment's rows, [0, returned), and the few rows
// after it (its ancestors in the draft chain and itself for a later pass), in `extras`.
int64_t visible_prefix(int64_t rows, int32_t passes, int64_t i, std::vector<int64_t>& extras) {
    extras.clear();
    const int64_t t = rows / passes, s = i / t + 1, pos = i % t;
    for (int64_t u = 2; u <= s; ++u) {
        const int64_t at = pos - s + u;
        if (at >= 0) extras.push_back((u - 1) * t + at);
    }
    return std::max<int64_t>(0, pos - s + 2);
}

// One (segment, KV head)'s rows gathered: rows [t, hd] contiguous and transposed [hd, tp] (tp: t rounded up to 16,
// zero columns past t).
struct gathered {
    std::vector<float> rows, cols;
    int64_t tp = 0;
    void take(const float* x, int64_t r0, int64_t t, int64_t stride, int64_t hd, bool transposed) {
        tp = (t + lanes - 1) / lanes * lanes;
        rows.resize(static_cast<size_t>(t * hd));
        cols.assign(transposed ? static_cast<size_t>(hd * tp) : 0, 0.0f);
        for (int64_t j = 0; j < t; ++j) {
            const float* src = x + (r0 + j) * stride;
            std::copy(src, src + hd, rows.data() + j * hd);
            if (transposed) {
                for (int64_t d = 0; d < hd; ++d) cols[d * tp + j] = src[d];
            }
        }
    }
};

struct job_shape {
    int64_t r0, t, kvh, group, hd, n_heads, n_kv_heads;
    int32_t passes;
    float scale;
};

job_shape job_of(std::span<const int64_t> bounds, const attention_shape& s, int64_t job, int32_t passes) {
    const int64_t sg = job / s.n_kv_heads;
    return {bounds[sg],
            bounds[sg + 1] - bounds[sg],
            job % s.n_kv_heads,
            s.n_heads / s.n_kv_heads,
            s.head_dim,
            s.n_heads,
            s.n_kv_heads,
            passes,
            1.0f / std::sqrt(static_cast<float>(s.head_dim))};
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void forward_job(
    const float* q, const float* k, const float* v, float* o, float* probs, const job_shape& js) {
    const int64_t t = js.t, g = js.group, hd = js.hd, h0 = js.kvh * g;
    gathered kk, vv;
    kk.take(k + js.kvh * hd, js.r0, t, js.n_kv_heads * hd, hd, true);
    vv.take(v + js.kvh * hd, js.r0, t, js.n_kv_heads * hd, hd, false);
    const int64_t sp = kk.tp + js.passes;  // a head's scores: the prefix (padded), then the extras
    std::vector<float> sc(static_cast<size_t>(g * sp));
    std::vector<int64_t> extras;
    for (int64_t i = 0; i < t; ++i) {
        const int64_t len = visible_prefix(t, js.passes, i, extras), ne = static_cast<int64_t>(extras.size());
        const float* qi = q + ((js.r0 + i) * js.n_heads + h0) * hd;  // the group's heads, contiguous
        product<false>(qi, hd, 1, g, kk.cols.data(), kk.tp, hd, len, sc.data(), sp, true);
        for (int64_t h = 0; h < g; ++h) {
            float* sh = sc.data() + h * sp;
            for (int64_t e = 0; e < ne; ++e) sh[len + e] = dot(qi + h * hd, kk.rows.data() + extras[e] * hd, hd);
            for (int64_t j = 0; j < len + ne; ++j) sh[j] *= js.scale;
            const float inv = 1.0f / exp_shifted_sum(sh, len + ne);
            for (int64_t j = 0; j < len + ne; ++j) sh[j] *= inv;
            float* pi = probs + (h0 + h) * t * t + i * t;
            std::copy(sh, sh + len, pi);
            for (int64_t e = 0; e < ne; ++e) pi[extras[e]] = sh[len + e];
        }
        float* oi = o + ((js.r0 + i) * js.n_heads + h0) * hd;
        product<false>(sc.data(), sp, 1, g, vv.rows.data(), hd, len, hd, oi, hd, false);
        for (int64_t h = 0; h < g; ++h) {
            for (int64_t e = 0; e < ne; ++e)
                axpy(sc[h * sp + len + e], vv.rows.data() + extras[e] * hd, oi + h * hd, hd);
        }
    }
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void backward_job(
    const float* q, const float* d_o, const float* k, const float* v, const float* probs, float* dq, float* dk,
    float* dv, const job_shape& js) {
    const int64_t t = js.t, g = js.group, hd = js.hd, h0 = js.kvh * g;
    gathered kk, vv;
    kk.take(k + js.kvh * hd, js.r0, t, js.n_kv_heads * hd, hd, false);
    vv.take(v + js.kvh * hd, js.r0, t, js.n_kv_heads * hd, hd, true);
    const int64_t sp = vv.tp + js.passes;
    std::vector<float> ds(static_cast<size_t>(g * sp));
    std::vector<float> dk_seg(static_cast<size_t>(t * hd), 0.0f), dv_seg(dk_seg.size(), 0.0f);
    std::vector<int64_t> extras;
    for (int64_t i = 0; i < t; ++i) {
        const int64_t len = visible_prefix(t, js.passes, i, extras), ne = static_cast<int64_t>(extras.size());
        const float* doi = d_o + ((js.r0 + i) * js.n_heads + h0) * hd;
        const float* qi = q + ((js.r0 + i) * js.n_heads + h0) * hd;
        const float* p0 = probs + h0 * t * t + i * t;  // head h's row at p0 + h·t·t
        // dp_hj = do_h · v_j (into ds), then ds_hj = p_hj (dp_hj - Σ_j' p_hj' dp_hj') · scale.
        product<false>(doi, hd, 1, g, vv.cols.data(), vv.tp, hd, len, ds.data(), sp, true);
        for (int64_t h = 0; h < g; ++h) {
            const float* pi = p0 + h * t * t;
            float* d = ds.data() + h * sp;
            for (int64_t e = 0; e < ne; ++e) d[len + e] = dot(doi + h * hd, vv.rows.data() + extras[e] * hd, hd);
            float pdp = dot(pi, d, len);
            for (int64_t e = 0; e < ne; ++e) pdp += pi[extras[e]] * d[len + e];
            for (int64_t j = 0; j < len; ++j) d[j] = pi[j] * (d[j] - pdp) * js.scale;
            for (int64_t e = 0; e < ne; ++e) d[len + e] = pi[extras[e]] * (d[len + e] - pdp) * js.scale;
        }
        // dq_h += Σ_j ds_hj k_j;  dk_j += Σ_h ds_hj q_h;  dv_j += Σ_h p_hj do_h.
        float* dqi = dq + ((js.r0 + i) * js.n_heads + h0) * hd;
        product<true>(ds.data(), sp, 1, g, kk.rows.data(), hd, len, hd, dqi, hd, false);
        product<true>(ds.data(), 1, sp, len, qi, hd, g, hd, dk_seg.data(), hd, false);
        product<true>(p0, 1, t * t, len, doi, hd, g, hd, dv_seg.data(), hd, false);
        for (int64_t e = 0; e < ne; ++e) {
            const int64_t j = extras[e];
            for (int64_t h = 0; h < g; ++h) {
                const float ds_hj = ds[h * sp + len + e];
                axpy(ds_hj, kk.rows.data() + j * hd, dqi + h * hd, hd);
                axpy(ds_hj, qi + h * hd, dk_seg.data() + j * hd, hd);
                axpy(p0[h * t * t + j], doi + h * hd, dv_seg.data() + j * hd, hd);
            }
        }
    }
    for (int64_t j = 0; j < t; ++j) {
        const int64_t row = ((js.r0 + j) * js.n_kv_heads + js.kvh) * hd;
        for (int64_t d = 0; d < hd; ++d) {
            dk[row + d] += dk_seg[j * hd + d];
            dv[row + d] += dv_seg[j * hd + d];
        }
    }
}

}  // namespace

void visible_rows(int64_t rows, int32_t passes, int64_t i, std::vector<int64_t>& out) {
    std::vector<int64_t> extras;
    const int64_t len = visible_prefix(rows, passes, i, extras);
    out.clear();
    for (int64_t j = 0; j < len; ++j) out.push_back(j);
    out.insert(out.end(), extras.begin(), extras.end());
}

void attention_forward(const float* q, const float* k, const float* v, float* o, std::span<const int64_t> bounds,
                       const attention_shape& s, attention_cache& cache, cpu::thread_pool& pool, int32_t passes) {
    const int64_t n_seg = static_cast<int64_t>(bounds.size()) - 1;
    cache.offsets.resize(n_seg);
    int64_t total = 0;
    for (int64_t sg = 0; sg < n_seg; ++sg) {
        const int64_t t = bounds[sg + 1] - bounds[sg];
        TROUPE_ASSERT(passes >= 1 && t % passes == 0, "attention: segment " + std::to_string(sg) + " has " +
                                                          std::to_string(t) + " rows, not " + std::to_string(passes) +
                                                          " passes of equal length");
        cache.offsets[sg] = total;
        total += s.n_heads * t * t;
    }
    cache.probs.assign(static_cast<size_t>(total), 0.0f);
    pool.parallel_for(n_seg * s.n_kv_heads, [&](int64_t begin, int64_t end) {
        for (int64_t job = begin; job < end; ++job) {
            const int64_t sg = job / s.n_kv_heads;
            forward_job(q, k, v, o, cache.probs.data() + cache.offsets[sg], job_of(bounds, s, job, passes));
        }
    });
}

void attention_backward(const float* q, const float* k, const float* v, const float* d_o,
                        std::span<const int64_t> bounds, const attention_shape& s, const attention_cache& cache,
                        float* dq, float* dk, float* dv, cpu::thread_pool& pool, int32_t passes) {
    const int64_t n_seg = static_cast<int64_t>(bounds.size()) - 1;
    pool.parallel_for(n_seg * s.n_kv_heads, [&](int64_t begin, int64_t end) {
        for (int64_t job = begin; job < end; ++job) {
            const int64_t sg = job / s.n_kv_heads;
            backward_job(q, d_o, k, v, cache.probs.data() + cache.offsets[sg], dq, dk, dv,
                         job_of(bounds, s, job, passes));
        }
    });
}

}  // namespace troupe::train
