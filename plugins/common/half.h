// IEEE binary16 conversions and ggml's round-half-to-even for plugins (SDK-only includes, so a plugin needs
// nothing from troupe's kernels). Bit for bit the same as kernels/fp16.h and kernels/ref's nearest_int: the
// codecs in quant_codec.h must write exactly the bytes troupe's reference quantizers write.
#pragma once

#include <cstdint>
#include <cstring>

namespace troupe::quant_common {

inline float fp32_from_bits(uint32_t w) {
    float f;
    std::memcpy(&f, &w, 4);
    return f;
}

inline uint32_t fp32_to_bits(float f) {
    uint32_t w;
    std::memcpy(&w, &f, 4);
    return w;
}

// Exact half -> float, subnormals, infinities and NaNs included.
inline float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) return fp32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0) return fp32_from_bits(sign);
        int e = -1;
        do {
            ++e;
            mant <<= 1;
        } while ((mant & 0x400) == 0);
        return fp32_from_bits(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | ((mant & 0x3ff) << 13));
    }
    return fp32_from_bits(sign | (exp + 112) << 23 | (mant << 13));
}

// float -> half, round to nearest even, overflow to infinity.
inline uint16_t fp32_to_fp16(float f) {
    const uint32_t x = fp32_to_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000;
    const uint32_t abs = x & 0x7fffffff;
    if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to >= 65520
    if (abs < 0x38800000u) {                                              // subnormal or zero in half
        const float v = fp32_from_bits(abs) + 0.5f;                       // ulp of half subnormal = 2^-24
        return static_cast<uint16_t>(sign | (fp32_to_bits(v) - fp32_to_bits(0.5f)));
    }
    const uint32_t mant_odd = (abs >> 13) & 1;
    const uint32_t r = abs + 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
    return static_cast<uint16_t>(sign | (r >> 13));
}

// x rounded to fp16 and back.
inline float fp16_round(float x) {
    return fp16_to_fp32(fp32_to_fp16(x));
}

// Round half to even, as ggml's nearest_int (valid for |x| < 2^22).
inline int nearest_int(float x) {
    float v = x + 12582912.f;  // 1.5 * 2^23: the addition rounds to an integer, half to even
    int32_t i;
    std::memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

}  // namespace troupe::quant_common
