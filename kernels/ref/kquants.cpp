// Reference quantize / dequantize of the k-quant formats, Q2_K .. Q6_K (declared in quants.h; block layouts in
// kernels/ggml_types.h). Dequantization in ggml's order of float operations; the quantizers are troupe's own.
//
// Q4_K super-block (256 values = 8 sub-blocks of 32):  x = d * sc[j] * q - dmin * m[j],  q in 0..15
//   scales[12] packs the 6-bit sc[j], m[j]:  j < 4:  sc = scales[j] & 63,  m = scales[j + 4] & 63
//                                             j >= 4: sc = scales[j + 4] & 15 | (scales[j - 4] >> 6) << 4
//                                                     m  = scales[j + 4] >> 4 | (scales[j] >> 6) << 4
//   qs: chunk c of 64 values = sub-blocks 2c (low nibbles of qs[32c .. 32c + 31]) and 2c + 1 (high nibbles).
// Q6_K super-block (256 values = 16 sub-blocks of 16):  x = d * scales[j] * (q - 32),  q in 0..63
//   half h (128 values): element 32k + l (k = 0..3, l = 0..31) has its low 4 bits in
//   ql[64h + l + 32 (k & 1)] (low nibble for k < 2, high for k >= 2) and its high 2 bits in
//   qh[32h + l] at bit 2k.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/result.h"
#include "kernels/fp16.h"
#include "kernels/ref/quants.h"

namespace troupe::ref {

void q4_k_scale_min(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
        *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

void dequantize_row_q4_k(const block_q4_k* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float d = fp16_to_fp32(x[b].d);
        const float dmin = fp16_to_fp32(x[b].dmin);
        const uint8_t* q = x[b].qs;
        float* out = y + b * qk_k;
        for (int c = 0; c < 4; ++c) {  // chunks of 64 values: two sub-blocks sharing 32 bytes
            uint8_t sc, m;
            q4_k_scale_min(2 * c, x[b].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            q4_k_scale_min(2 * c + 1, x[b].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; ++l) out[64 * c + l] = d1 * (q[32 * c + l] & 0x0f) - m1;
            for (int l = 0; l < 32; ++l) out[64 * c + 32 + l] = d2 * (q[32 * c + l] >> 4) - m2;
        }
    }
}

int q2_k_value(const block_q2_k& b, int e) {
    return (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

void dequantize_row_q2_k(const block_q2_k* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float d = fp16_to_fp32(x[b].d);
        const float dmin = fp16_to_fp32(x[b].dmin);
        for (int j = 0; j < 16; ++j) {  // sub-blocks of 16, in ggml's order of operations (d * sc) * q - dmin * m
            const float dj = d * static_cast<float>(x[b].scales[j] & 0x0f);
            const float mj = dmin * static_cast<float>(x[b].scales[j] >> 4);
            for (int i = 0; i < 16; ++i)
                y[b * qk_k + 16 * j + i] = dj * static_cast<float>(q2_k_value(x[b], 16 * j + i)) - mj;
        }
    }
}

int q3_k_scale(const block_q3_k& b, int j) {
    const int low = j < 8 ? (b.scales[j] & 0x0f) : (b.scales[j - 8] >> 4);
    const int high = (b.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | high << 4) - 32;
}

int q3_k_value(const block_q3_k& b, int e) {
    const int low = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const bool high = (b.hmask[e % 32] >> (e / 32)) & 1;
    return high ? low : low - 4;
}

void dequantize_row_q3_k(const block_q3_k* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float d = fp16_to_fp32(x[b].d);
        for (int j = 0; j < 16; ++j) {  // sub-blocks of 16, in ggml's order of operations (d * sc) * q
            const float dj = d * static_cast<float>(q3_k_scale(x[b], j));
            for (int i = 0; i < 16; ++i)
                y[b * qk_k + 16 * j + i] = dj * static_cast<float>(q3_k_value(x[b], 16 * j + i));
        }
    }
}

int q5_k_code(const block_q5_k& b, int e) {
    const int c = e / 64, l = e % 32, high_nibble = (e % 64) / 32;
    const int low = high_nibble ? (b.qs[32 * c + l] >> 4) : (b.qs[32 * c + l] & 0x0f);
    return low | ((b.qh[l] >> (2 * c + high_nibble)) & 1) << 4;
}

void dequantize_row_q5_k(const block_q5_k* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float d = fp16_to_fp32(x[b].d);
        const float dmin = fp16_to_fp32(x[b].dmin);
        float* out = y + b * qk_k;
        for (int j = 0; j < 8; ++j) {  // sub-blocks of 32, in ggml's order of operations (d * sc) * q - dmin * m
            uint8_t sc, m;
            q4_k_scale_min(j, x[b].scales, &sc, &m);
            const float dj = d * sc, mj = dmin * m;
            for (int i = 0; i < 32; ++i) out[32 * j + i] = dj * q5_k_code(x[b], 32 * j + i) - mj;
        }
    }
}

void dequantize_row_q6_k(const block_q6_k* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float d = fp16_to_fp32(x[b].d);
        for (int h = 0; h < 2; ++h) {
            const uint8_t* ql = x[b].ql + 64 * h;
            const uint8_t* qh = x[b].qh + 32 * h;
            const int8_t* sc = x[b].scales + 8 * h;
            float* out = y + b * qk_k + 128 * h;
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                out[l] = d * sc[is + 0] * q1;
                out[l + 32] = d * sc[is + 2] * q2;
                out[l + 64] = d * sc[is + 4] * q3;
                out[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

namespace {

// Quantization code of x on the grid offset + scale * q, q in [lo, hi].
int grid_code(float x, float scale, float offset, int lo, int hi) {
    if (scale == 0.0f) return std::clamp(0, lo, hi);
    return std::clamp(nearest_int((x - offset) / scale), lo, hi);
}

float grid_error(const float* x, int n, float scale, float offset, int q_max) {
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float e = x[i] - (offset + scale * grid_code(x[i], scale, offset, 0, q_max));
        err += e * e;
    }
    return err;
}

// Q4_K / Q5_K sub-block fit: x ~ scale * q + offset with q in 0..q_max (15 or 31) and offset <= 0 (so that -offset,
// the "min", is stored unsigned). Starts from the min/max range, then alternates code assignment and a least-squares
// refit of (scale, offset) while the squared error drops.
void fit_k_sub_block(const float* x, int n, int q_max, float* scale, float* min) {
    float lo = 0.0f, hi = x[0];
    for (int i = 0; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
    float best_scale = (hi - lo) / static_cast<float>(q_max), best_offset = lo;
    if (best_scale > 0.0f) {
        float best_err = grid_error(x, n, best_scale, best_offset, q_max);
        for (int iter = 0; iter < 8; ++iter) {
            double sq = 0, sqq = 0, sx = 0, sqx = 0;
            for (int i = 0; i < n; ++i) {
                const int q = grid_code(x[i], best_scale, best_offset, 0, q_max);
                sq += q;
                sqq += static_cast<double>(q) * q;
                sx += x[i];
                sqx += q * static_cast<double>(x[i]);
            }
            const double det = n * sqq - sq * sq;
            if (det <= 0) break;
            double s = (n * sqx - sq * sx) / det;
            double off = (sx - s * sq) / n;
            if (off > 0) {
                off = 0;
                s = sqx / sqq;
            }
            if (s <= 0) break;
            const float err = grid_error(x, n, static_cast<float>(s), static_cast<float>(off), q_max);
            if (err >= best_err) break;
            best_err = err;
            best_scale = static_cast<float>(s);
            best_offset = static_cast<float>(off);
        }
    }
    *scale = best_scale;
    *min = -best_offset;
}

// Symmetric fit x ~ scale * q, q in [lo, hi]: from a first scale, alternate code assignment and the
// least-squares scale sum(x q) / sum(q q) while the squared error drops.
float refit_symmetric_scale(const float* x, int n, float scale, int lo, int hi) {
    auto error = [&](float s) {
        float err = 0.0f;
        for (int i = 0; i < n; ++i) {
            const float e = x[i] - s * grid_code(x[i], s, 0.0f, lo, hi);
            err += e * e;
        }
        return err;
    };
    float best_err = error(scale);
    for (int iter = 0; iter < 4 && scale != 0.0f; ++iter) {
        double sxq = 0, sqq = 0;
        for (int i = 0; i < n; ++i) {
            const int q = grid_code(x[i], scale, 0.0f, lo, hi);
            sxq += static_cast<double>(x[i]) * q;
            sqq += static_cast<double>(q) * q;
        }
        if (sqq == 0) break;
        const auto s = static_cast<float>(sxq / sqq);
        const float err = error(s);
        if (err >= best_err) break;
        best_err = err;
        scale = s;
    }
    return scale;
}

// Q3_K / Q6_K: the signed scale of each of a super-block's 16 sub-blocks of 16 (the element of largest |x| on q_min,
// then refit_symmetric_scale); returns the scale of largest magnitude, with its sign.
float symmetric_sub_block_scales(const float* xb, int q_min, int q_max, float* scales) {
    float max_scale = 0.0f, amax_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < 16; ++i) {
            if (std::fabs(xb[16 * j + i]) > amax) {
                amax = std::fabs(xb[16 * j + i]);
                max = xb[16 * j + i];
            }
        }
        scales[j] = refit_symmetric_scale(xb + 16 * j, 16, max / static_cast<float>(q_min), q_min, q_max);
        if (std::fabs(scales[j]) > amax_scale) {
            amax_scale = std::fabs(scales[j]);
            max_scale = scales[j];
        }
    }
    return max_scale;
}

}  // namespace

namespace {

// The scales, mins and codes of one Q4_K / Q5_K super-block (q_max 15 / 31): per sub-block of 32 a least-squares
// scale and min (min <= 0), then 6-bit scale / min codes against fp16 d and dmin, packed as Q4_K packs them; q[256]
// the codes against the stored (rounded) scales.
void quantize_k_super_block(const float* xb, int q_max, uint16_t* d_out, uint16_t* dmin_out, uint8_t* packed,
                            uint8_t* q) {
    float scales[8], mins[8];  // [8 sub-blocks]
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
        fit_k_sub_block(xb + 32 * j, 32, q_max, &scales[j], &mins[j]);
        max_scale = std::max(max_scale, scales[j]);
        max_min = std::max(max_min, mins[j]);
    }
    *d_out = fp32_to_fp16(max_scale / 63.0f);
    *dmin_out = fp32_to_fp16(max_min / 63.0f);
    const float d = fp16_to_fp32(*d_out), dmin = fp16_to_fp32(*dmin_out);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
        sc[j] = static_cast<uint8_t>(d > 0.0f ? std::clamp(nearest_int(scales[j] / d), 0, 63) : 0);
        m[j] = static_cast<uint8_t>(dmin > 0.0f ? std::clamp(nearest_int(mins[j] / dmin), 0, 63) : 0);
    }
    std::memset(packed, 0, k_scale_size);
    for (int j = 0; j < 4; ++j) {
        packed[j] = sc[j] | static_cast<uint8_t>((sc[j + 4] >> 4) << 6);
        packed[j + 4] = m[j] | static_cast<uint8_t>((m[j + 4] >> 4) << 6);
        packed[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
    }
    for (int j = 0; j < 8; ++j) {
        const float step = d * sc[j], offset = -(dmin * m[j]);
        for (int i = 0; i < 32; ++i)
            q[32 * j + i] = static_cast<uint8_t>(grid_code(xb[32 * j + i], step, offset, 0, q_max));
    }
}

}  // namespace

void quantize_row_q4_k(const float* x, block_q4_k* y, int64_t n) {
    TROUPE_ASSERT(n % qk_k == 0);
    for (int64_t b = 0; b < n / qk_k; ++b) {
        uint8_t q[qk_k];  // [256] codes 0..15
        quantize_k_super_block(x + b * qk_k, 15, &y[b].d, &y[b].dmin, y[b].scales, q);
        for (int c = 0; c < 4; ++c) {
            for (int l = 0; l < 32; ++l)
                y[b].qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
        }
    }
}

void quantize_row_q5_k(const float* x, block_q5_k* y, int64_t n) {
    TROUPE_ASSERT(n % qk_k == 0);
    for (int64_t b = 0; b < n / qk_k; ++b) {
        uint8_t q[qk_k];  // [256] codes 0..31
        quantize_k_super_block(x + b * qk_k, 31, &y[b].d, &y[b].dmin, y[b].scales, q);
        std::memset(y[b].qh, 0, sizeof y[b].qh);
        for (int c = 0; c < 4; ++c) {
            for (int l = 0; l < 32; ++l) {
                const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
                y[b].qs[32 * c + l] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
                y[b].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
        }
    }
}

void quantize_row_q2_k(const float* x, block_q2_k* y, int64_t n) {
    TROUPE_ASSERT(n % qk_k == 0);
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float* xb = x + b * qk_k;
        float scales[16], mins[16];  // [16 sub-blocks] least-squares scale and min (min <= 0 stored as -min)
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 16; ++j) {
            fit_k_sub_block(xb + 16 * j, 16, 3, &scales[j], &mins[j]);
            max_scale = std::max(max_scale, scales[j]);
            max_min = std::max(max_min, mins[j]);
        }
        y[b].d = fp32_to_fp16(max_scale / 15.0f);
        y[b].dmin = fp32_to_fp16(max_min / 15.0f);
        const float d = fp16_to_fp32(y[b].d), dmin = fp16_to_fp32(y[b].dmin);
        std::memset(y[b].qs, 0, sizeof y[b].qs);
        for (int j = 0; j < 16; ++j) {
            const int sc = d > 0.0f ? std::clamp(nearest_int(scales[j] / d), 0, 15) : 0;
            const int m = dmin > 0.0f ? std::clamp(nearest_int(mins[j] / dmin), 0, 15) : 0;
            y[b].scales[j] = static_cast<uint8_t>(sc | m << 4);
            const float step = d * static_cast<float>(sc), offset = -(dmin * static_cast<float>(m));
            for (int i = 0; i < 16; ++i) {
                const int e = 16 * j + i;
                const int q = grid_code(xb[e], step, offset, 0, 3);
                y[b].qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(q << (2 * ((e % 128) / 32)));
            }
        }
    }
}

void quantize_row_q3_k(const float* x, block_q3_k* y, int64_t n) {
    TROUPE_ASSERT(n % qk_k == 0);
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float* xb = x + b * qk_k;
        float scales[16];  // [16 sub-blocks] signed: the largest |x| of the sub-block maps to q = -4
        const float max_scale = symmetric_sub_block_scales(xb, -4, 3, scales);
        const float amax_scale = std::fabs(max_scale);
        std::memset(&y[b], 0, sizeof y[b]);
        if (amax_scale == 0.0f) continue;  // d = 0: every value 0
        // 6-bit scale codes sc - 32 in -32..31, the largest |scale| on -32 (ggml's packing).
        const float iscale = -32.0f / max_scale;
        for (int j = 0; j < 16; ++j) {
            const int l = std::clamp(nearest_int(iscale * scales[j]), -32, 31) + 32;
            if (j < 8) {
                y[b].scales[j] = static_cast<uint8_t>(l & 0x0f);
            } else {
                y[b].scales[j - 8] |= static_cast<uint8_t>((l & 0x0f) << 4);
            }
            y[b].scales[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
        }
        y[b].d = fp32_to_fp16(1.0f / iscale);
        const float d = fp16_to_fp32(y[b].d);
        for (int e = 0; e < qk_k; ++e) {
            const float step = d * static_cast<float>(q3_k_scale(y[b], e / 16));
            const int q = grid_code(xb[e], step, 0.0f, -4, 3);  // -4..3
            if (q >= 0) y[b].hmask[e % 32] |= static_cast<uint8_t>(1u << (e / 32));
            const int low = q >= 0 ? q : q + 4;
            y[b].qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(low << (2 * ((e % 128) / 32)));
        }
    }
}

void quantize_row_q6_k(const float* x, block_q6_k* y, int64_t n) {
    TROUPE_ASSERT(n % qk_k == 0);
    for (int64_t b = 0; b < n / qk_k; ++b) {
        const float* xb = x + b * qk_k;
        float scales[16];  // [16 sub-blocks] signed: the largest |x| of the sub-block maps to q - 32 = -32
        const float max_scale = symmetric_sub_block_scales(xb, -32, 31, scales);
        const float amax_scale = std::fabs(max_scale);
        std::memset(y[b].ql, 0, sizeof y[b].ql);
        std::memset(y[b].qh, 0, sizeof y[b].qh);
        if (amax_scale == 0.0f) {
            std::memset(y[b].scales, 0, sizeof y[b].scales);
            y[b].d = 0;
            for (int i = 0; i < 32; ++i) y[b].qh[i] = 0xaa;  // every code 32, i.e. zero
            continue;
        }
        const float iscale = -128.0f / max_scale;
        y[b].d = fp32_to_fp16(1.0f / iscale);
        const float d = fp16_to_fp32(y[b].d);
        uint8_t q[qk_k];  // [256] codes 0..63
        for (int j = 0; j < 16; ++j) {
            const int s = std::clamp(nearest_int(iscale * scales[j]), -128, 127);
            y[b].scales[j] = static_cast<int8_t>(s);
            for (int i = 0; i < 16; ++i)
                q[16 * j + i] = static_cast<uint8_t>(grid_code(xb[16 * j + i], d * s, 0.0f, -32, 31) + 32);
        }
        for (int h = 0; h < 2; ++h) {
            for (int l = 0; l < 32; ++l) {
                const int q1 = q[128 * h + l], q2 = q[128 * h + l + 32];
                const int q3 = q[128 * h + l + 64], q4 = q[128 * h + l + 96];
                y[b].ql[64 * h + l] = static_cast<uint8_t>((q1 & 0x0f) | ((q3 & 0x0f) << 4));
                y[b].ql[64 * h + l + 32] = static_cast<uint8_t>((q2 & 0x0f) | ((q4 & 0x0f) << 4));
                y[b].qh[32 * h + l] =
                    static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

}  // namespace troupe::ref
