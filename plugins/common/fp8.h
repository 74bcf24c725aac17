// FP8 numbers, scalar: encode float -> fp8 (round to nearest, ties to even, saturating) and decode fp8 -> float, for
// the two formats of the OCP 8-bit floating point specification (NVIDIA's __nv_fp8_e4m3 / __nv_fp8_e5m2):
//
//   e4m3 ("e4m3fn"): s eeee mmm, bias 7, no infinities, one NaN pattern per sign (s 1111 111), largest finite 448,
//                    smallest normal 2^-6, subnormals m / 8 * 2^-6 (smallest 2^-9)
//   e5m2           : s eeeee mm, bias 15, IEEE-like: infinities s 11111 00, NaNs s 11111 {01,10,11}, largest finite
//                    57344, smallest normal 2^-14, subnormals m / 4 * 2^-14 (smallest 2^-16); e5m2 is the high byte
//                    of an IEEE half
//
// Encoding saturates (NVIDIA's __NV_SATFINITE): any value above the largest finite magnitude, infinities included,
// becomes the largest finite value of its sign; NaN becomes the format's NaN (0x7f, with the input's sign). Negative
// zero keeps its sign.
//
// Header-only, no dependencies beyond the standard library, usable by any plugin (weights, KV caches). The SIMD
// kernels that convert in registers live beside their plugins; these functions are their reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace troupe::fp8 {

enum class format { e4m3, e5m2 };

// The layout of a format: bits of exponent and mantissa, exponent bias, largest finite value and its code.
struct format_traits {
    int exponent_bits;
    int mantissa_bits;
    int bias;
    float max_finite;
    uint8_t max_code;  // the largest finite magnitude, sign bit clear
    uint8_t nan_code;  // the NaN this header writes, sign bit clear
};

constexpr format_traits traits(format f) {
    return f == format::e4m3 ? format_traits{4, 3, 7, 448.0f, 0x7e, 0x7f}
                             : format_traits{5, 2, 15, 57344.0f, 0x7b, 0x7f};
}

inline uint32_t float_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
}

inline float bits_float(uint32_t u) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

// 2^e for a normal float exponent e (-126..127), exact and without a libm call.
inline float pow2(int e) {
    return bits_float(static_cast<uint32_t>(e + 127) << 23);
}

// float -> fp8 code, round to nearest even, saturating (see the top of the file).
inline uint8_t encode(float x, format f) {
    const format_traits t = traits(f);
    const uint32_t u = float_bits(x);
    const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
    const float a = std::fabs(x);
    if (std::isnan(x)) return sign | t.nan_code;
    if (a >= t.max_finite) return sign | t.max_code;  // also infinities
    const int min_normal_exp = 1 - t.bias;            // 2^min_normal_exp is the smallest normal
    if (a < pow2(min_normal_exp)) {
        // Subnormal (or zero): a multiple of 2^(min_normal_exp - mantissa_bits). The scaling is exact and nearbyint
        // rounds half to even in the default rounding mode; a result of 2^mantissa_bits is the smallest normal,
        // whose code is that same integer.
        const float steps = std::nearbyint(a * pow2(t.mantissa_bits - min_normal_exp));
        return sign | static_cast<uint8_t>(steps);
    }
    // Normal: round the float's 23-bit mantissa to mantissa_bits (ties to even); a carry moves into the exponent,
    // as it should. Then move the exponent from float's bias 127 to the format's. a < max_finite keeps the result
    // at or below max_code.
    const int drop = 23 - t.mantissa_bits;
    const uint32_t ua = float_bits(a);
    const uint32_t rounded = (ua + ((1u << (drop - 1)) - 1) + ((ua >> drop) & 1)) >> drop;
    const uint32_t code = rounded - (static_cast<uint32_t>(127 - t.bias) << t.mantissa_bits);
    return sign | static_cast<uint8_t>(code);
}

// fp8 code -> float, exact (every fp8 value is a float).
inline float decode(uint8_t code, format f) {
    const format_traits t = traits(f);
    const uint32_t sign = static_cast<uint32_t>(code & 0x80) << 24;
    const uint32_t mag = code & 0x7f;
    const uint32_t e = mag >> t.mantissa_bits;
    const uint32_t m = mag & ((1u << t.mantissa_bits) - 1);
    const uint32_t e_max = (1u << t.exponent_bits) - 1;
    if (f == format::e4m3 && mag == 0x7f) return bits_float(sign | 0x7fc00000u);
    if (f == format::e5m2 && e == e_max) return bits_float(sign | (m == 0 ? 0x7f800000u : 0x7fc00000u));
    if (e == 0) {  // subnormal: m * 2^(1 - bias - mantissa_bits), exact in float
        const float v = static_cast<float>(m) * pow2(1 - t.bias - t.mantissa_bits);
        return bits_float(sign | float_bits(v));
    }
    return bits_float(sign | ((e + 127 - t.bias) << 23) | (m << (23 - t.mantissa_bits)));
}

inline uint8_t encode_e4m3(float x) {
    return encode(x, format::e4m3);
}
inline uint8_t encode_e5m2(float x) {
    return encode(x, format::e5m2);
}
inline float decode_e4m3(uint8_t code) {
    return decode(code, format::e4m3);
}
inline float decode_e5m2(uint8_t code) {
    return decode(code, format::e5m2);
}

}  // namespace troupe::fp8
