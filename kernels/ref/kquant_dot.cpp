// k-quant dot products in ggml's x86 recipe (see kquant_dot.h).
#include "kernels/ref/kquant_dot.h"

#include <cmath>

#include "kernels/fp16.h"
#include "kernels/ref/quants.h"

namespace troupe::ref {
namespace {

// Element e (0..255) of a Q6_K block as the unsigned 6-bit value q (x = d * scale * (q - 32)).
int q6_k_value(const block_q6_k& b, int e) {
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t ql = b.ql[64 * half + 32 * (k % 2) + l];
    const uint8_t qh = b.qh[32 * half + l];
    const int low = (k < 2) ? (ql & 0x0f) : (ql >> 4);
    return low | (((qh >> (2 * k)) & 3) << 4);
}

// The lanes of the formats with a scale per 16 elements (Q3_K, Q6_K): value(b, e) and scale(b, j) of block b.
template <class Block, class Value, class Scale>
float dot_sixteens(const Block* w, const block_q8_k* x, int64_t nb, const Value& value, const Scale& scale) {
    float acc[8] = {};  // per lane: sum over super-blocks of d * lane sum
    for (int64_t b = 0; b < nb; ++b) {
        const float d = x[b].d * fp16_to_fp32(w[b].d);
        int32_t sumi[8] = {};          // [lane]
        for (int c = 0; c < 8; ++c) {  // chunk of 32: sub-blocks 2c and 2c + 1
            for (int k = 0; k < 8; ++k) {
                int32_t dot = 0;
                for (int i = 4 * k; i < 4 * k + 4; ++i) dot += value(w[b], 32 * c + i) * x[b].qs[32 * c + i];
                sumi[k] += scale(w[b], 2 * c + k / 4) * dot;
            }
        }
        for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(sumi[k]), acc[k]);
    }
    return hsum_8_lanes(acc);
}

}  // namespace

float hsum_8_lanes(const float* a) {
    float r[4];
    for (int k = 0; k < 4; ++k) r[k] = a[k + 4] + a[k];
    return (r[0] + r[2]) + (r[1] + r[3]);
}

float dot_q2_k_q8_k(const block_q2_k* w, const block_q8_k* x, int64_t nb) {
    float acc[8] = {};  // per lane: the mins' then the codes' products of every super-block, in that order
    for (int64_t b = 0; b < nb; ++b) {
        const float d = x[b].d * fp16_to_fp32(w[b].d);
        const float dmin = -x[b].d * fp16_to_fp32(w[b].dmin);
        const int16_t* bs = x[b].bsums;
        for (int k = 0; k < 8; ++k) {
            const int32_t prod = (w[b].scales[2 * k] >> 4) * bs[2 * k] + (w[b].scales[2 * k + 1] >> 4) * bs[2 * k + 1];
            acc[k] = std::fma(dmin, static_cast<float>(prod), acc[k]);
        }
        int32_t sumi[8] = {};          // [lane]
        for (int c = 0; c < 8; ++c) {  // chunk of 32: sub-blocks 2c and 2c + 1
            for (int k = 0; k < 8; ++k) {
                int32_t dot = 0;
                for (int i = 4 * k; i < 4 * k + 4; ++i) dot += q2_k_value(w[b], 32 * c + i) * x[b].qs[32 * c + i];
                sumi[k] += (w[b].scales[2 * c + k / 4] & 0x0f) * dot;
            }
        }
        for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(sumi[k]), acc[k]);
    }
    return hsum_8_lanes(acc);
}

float dot_q3_k_q8_k(const block_q3_k* w, const block_q8_k* x, int64_t nb) {
    return dot_sixteens(w, x, nb, q3_k_value, q3_k_scale);
}

float dot_q4_k_q8_k(const block_q4_k* w, const block_q8_k* x, int64_t nb) {
    float acc[8] = {};    // per lane: sum over super-blocks of d * lane sum
    float acc_m[4] = {};  // per pair of sub-blocks: sum of -d_x * dmin * (m * bsum)
    for (int64_t b = 0; b < nb; ++b) {
        const float d = x[b].d * fp16_to_fp32(w[b].d);
        const float dmin = -x[b].d * fp16_to_fp32(w[b].dmin);
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; ++j) q4_k_scale_min(j, w[b].scales, &sc[j], &m[j]);
        const int16_t* bs = x[b].bsums;
        for (int k = 0; k < 4; ++k) {
            const int32_t prod =
                m[2 * k] * (bs[4 * k] + bs[4 * k + 1]) + m[2 * k + 1] * (bs[4 * k + 2] + bs[4 * k + 3]);
            acc_m[k] = std::fma(dmin, static_cast<float>(prod), acc_m[k]);
        }
        int32_t sumi[8] = {};          // [lane]
        for (int c = 0; c < 4; ++c) {  // chunk of 64: sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles)
            const uint8_t* q = w[b].qs + 32 * c;
            const int8_t* a = x[b].qs + 64 * c;
            for (int k = 0; k < 8; ++k) {
                int32_t lo = 0, hi = 0;
                for (int i = 4 * k; i < 4 * k + 4; ++i) {
                    lo += (q[i] & 0x0f) * a[i];
                    hi += (q[i] >> 4) * a[32 + i];
                }
                sumi[k] += sc[2 * c] * lo + sc[2 * c + 1] * hi;
            }
        }
        for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(sumi[k]), acc[k]);
    }
    return hsum_8_lanes(acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]));
}

float dot_q5_k_q8_k(const block_q5_k* w, const block_q8_k* x, int64_t nb) {
    float acc[8] = {};   // per lane: sum over super-blocks of d * lane sum
    float summs = 0.0f;  // sum over super-blocks of -d_x * dmin * (mins . bsums), one scalar
    for (int64_t b = 0; b < nb; ++b) {
        const float d = x[b].d * fp16_to_fp32(w[b].d);
        const float dmin = -x[b].d * fp16_to_fp32(w[b].dmin);
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; ++j) q4_k_scale_min(j, w[b].scales, &sc[j], &m[j]);
        const int16_t* bs = x[b].bsums;
        int32_t mins_dot = 0;
        for (int j = 0; j < 8; ++j) mins_dot += m[j] * (bs[2 * j] + bs[2 * j + 1]);
        summs = std::fma(dmin, static_cast<float>(mins_dot), summs);
        int32_t sumi[8] = {};          // [lane]
        for (int c = 0; c < 8; ++c) {  // sub-block of 32
            const int8_t* a = x[b].qs + 32 * c;
            for (int k = 0; k < 8; ++k) {
                int32_t dot = 0;
                for (int i = 4 * k; i < 4 * k + 4; ++i) dot += q5_k_code(w[b], 32 * c + i) * a[i];
                sumi[k] += sc[c] * dot;
            }
        }
        for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(sumi[k]), acc[k]);
    }
    return hsum_8_lanes(acc) + summs;
}

float dot_q6_k_q8_k(const block_q6_k* w, const block_q8_k* x, int64_t nb) {
    return dot_sixteens(
        w, x, nb, [](const block_q6_k& b, int e) { return q6_k_value(b, e) - 32; },
        [](const block_q6_k& b, int j) { return int{b.scales[j]}; });
}

}  // namespace troupe::ref
