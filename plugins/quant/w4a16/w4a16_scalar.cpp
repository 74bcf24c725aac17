// The scalar twin of quant/w4a16's kernels: each row dequantized exactly (d * q + m) from the kernels' layout, then
// every product summed over k in order with fmaf, the same sums the SIMD prefill tiles form (bit for bit) and the SIMD
// decode kernels form in another order (equal but for rounding). Also the transposition of the activations for prefill.
#include <algorithm>
#include <cmath>
#include <vector>

#include "w4a16_i16.h"
#include "w4a16_kernels.h"

namespace troupe::w4a16 {
namespace {

// out[0..n_in) = row r dequantized from the kernels' layout: d * q + m (a multiply, then an add).
void dequant_row(const matrix& w, int64_t r, float* out) {
    const uint8_t* spans = w.spans(r);
    const float* scales = w.scales(r);
    for (int64_t b = 0; b < w.n_in / w.g; ++b) {
        const float d = scales[2 * b], m = scales[2 * b + 1];
        for (int64_t j = b * w.g; j < (b + 1) * w.g; ++j) {
            const float scaled = d * static_cast<float>(layout_code(spans, j));
            out[j] = scaled + m;
        }
    }
}

// x element (t, k) is x[t * ts + k * ks].
void rows_scalar(const matrix& w, const float* x, int64_t ts, int64_t ks, int64_t n_tokens, float* y, int64_t r0,
                 int64_t r1) {
    std::vector<float> wr(static_cast<size_t>(w.n_in));  // [n_in]
    for (int64_t r = r0; r < r1; ++r) {
        dequant_row(w, r, wr.data());
        for (int64_t t = 0; t < n_tokens; ++t) {
            float acc = 0.0f;
            for (int64_t k = 0; k < w.n_in; ++k) acc = std::fmaf(wr[k], x[t * ts + k * ks], acc);
            y[t * w.n_out + r] = acc;
        }
    }
}

void decode_scalar(const matrix& w, const float* x, int64_t n_tokens, float* y, int64_t r0, int64_t r1) {
    rows_scalar(w, x, w.n_in, 1, n_tokens, y, r0, r1);
}

void prefill_scalar(const matrix& w, const float* xt, int64_t n_pad, int64_t n_tokens, float* y, int64_t r0,
                    int64_t r1) {
    rows_scalar(w, xt, 1, n_pad, n_tokens, y, r0, r1);
}

const kernel_set k_scalar = {"scalar", decode_scalar, prefill_scalar, 16};

// The int16 recipe (w4a16_i16.h): lane L of 8 sums the weights k with k % 8 == L.
void decode_i16(const matrix& w, const i16_activations& a, float* y, int64_t r0, int64_t r1) {
    const int g = w.g;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* spans = w.spans(r);
        const float* scales = w.scales(r);
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            const int16_t* xt = a.x + t * a.n_in;
            const float* us = a.u + t * 2 * a.u_stride;  // (s_g, 0) pairs
            const float* um = us + a.u_stride;           // (0, s_g xsum_g) pairs
            float lanes[8] = {};
            float mlanes[8] = {};
            for (int64_t gi = 0; gi < a.n_groups; ++gi) {
                int32_t isum[8] = {};
                for (int64_t k = gi * g; k < (gi + 1) * g; ++k) {
                    const int64_t o = k % 32;
                    isum[k % 8] += layout_code(spans, k) * xt[k - o + 2 * (o % 16) + o / 16];
                }
                const float sd = scales[2 * gi] * us[2 * gi];
                for (int lane = 0; lane < 8; ++lane) {
                    lanes[lane] = std::fmaf(static_cast<float>(isum[lane]), sd, lanes[lane]);
                }
            }
            for (int64_t i = 0; i < 2 * a.n_groups; ++i) mlanes[i % 8] = std::fmaf(scales[i], um[i], mlanes[i % 8]);
            // The AVX2 kernel's reduction of its 8 lanes: halves, then pairs, then the last two.
            float h[4];
            for (int i = 0; i < 4; ++i) h[i] = (lanes[i] + mlanes[i]) + (lanes[i + 4] + mlanes[i + 4]);
            y[t * w.n_out + r] = (h[0] + h[2]) + (h[1] + h[3]);
        }
    }
}

}  // namespace

const kernel_set& scalar_kernels() {
    return k_scalar;
}

i16_decode_fn i16_decode_scalar() {
    return decode_i16;
}

void make_i16_activations(const float* x, int64_t n_tokens, int64_t n_in, int g, int16_t* xi, float* u) {
    const int64_t n_groups = n_in / g;
    const int64_t u_stride = i16_u_stride(n_in, g);
    for (int64_t t = 0; t < n_tokens; ++t) {
        float* us = u + t * 2 * u_stride;
        float* um = us + u_stride;
        std::fill(us, us + 2 * u_stride, 0.0f);
        for (int64_t gi = 0; gi < n_groups; ++gi) {
            const float* xg = x + t * n_in + gi * g;
            float max = 0.0f;
            for (int k = 0; k < g; ++k) {
                const float v = std::fabs(xg[k]);
                if (!(v <= max)) max = v;  // a NaN makes max NaN
            }
            const bool finite = max < INFINITY;
            const float inv = finite && max > 0.0f ? 32767.0f / max : 0.0f;
            int32_t sum = 0;
            for (int k = 0; k < g; ++k) {
                const int64_t at = gi * g + k;  // word of element `at` in pair order
                const int64_t o = at % 32;
                int32_t q = finite ? static_cast<int32_t>(std::nearbyint(xg[k] * inv)) : 0;
                q = std::clamp(q, -32767, 32767);
                xi[t * n_in + at - o + 2 * (o % 16) + o / 16] = static_cast<int16_t>(q);
                sum += q;
            }
            const float s = finite ? max / 32767.0f : NAN;
            us[2 * gi] = s;
            um[2 * gi + 1] = s * static_cast<float>(sum);
        }
    }
}

void transpose_activations(const float* x, int64_t n_tokens, int64_t n_in, int64_t n_pad, float* dst, int64_t k0,
                           int64_t k1) {
    constexpr int64_t tile = 16;  // 16 x 16 blocks: both sides' cache lines are used whole
    for (int64_t kb = k0; kb < k1; kb += tile) {
        const int64_t ke = std::min(kb + tile, k1);
        for (int64_t tb = 0; tb < n_pad; tb += tile) {
            for (int64_t k = kb; k < ke; ++k) {
                for (int64_t t = tb; t < tb + tile && t < n_pad; ++t) {
                    dst[k * n_pad + t] = t < n_tokens ? x[t * n_in + k] : 0.0f;
                }
            }
        }
    }
}

}  // namespace troupe::w4a16
