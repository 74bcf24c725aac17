// plugins/common/fp8.h, exhaustively over the 256 codes of both formats: decode against a formula written here from
// the OCP definitions (in double), encode(decode(c)) == c for every finite code, ties to even, saturation, NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "plugins/common/fp8.h"

namespace troupe::testing {
namespace {

using fp8::format;

struct format_case {
    const char* name;
    format f;
    int e_bits, m_bits, bias;
    double max_finite;
};

void PrintTo(const format_case& c, std::ostream* os) {
    *os << c.name;
}

// The value of a code by the textbook formula: (-1)^s * 2^(e - bias) * (1 + m / 2^M), subnormal 2^(1 - bias) * m /
// 2^M; e4m3fn: s 1111 111 is NaN and there are no infinities; e5m2: exponent all ones is inf (m = 0) or NaN.
double formula(uint8_t code, const format_case& c) {
    const int s = code >> 7;
    const int e = (code >> c.m_bits) & ((1 << c.e_bits) - 1);
    const int m = code & ((1 << c.m_bits) - 1);
    const int e_max = (1 << c.e_bits) - 1;
    const double sign = s ? -1.0 : 1.0;
    if (c.f == format::e4m3 && e == e_max && m == (1 << c.m_bits) - 1) return std::numeric_limits<double>::quiet_NaN();
    if (c.f == format::e5m2 && e == e_max) {
        return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    }
    const double frac = static_cast<double>(m) / (1 << c.m_bits);
    if (e == 0) return sign * std::pow(2.0, 1 - c.bias) * frac;
    return sign * std::pow(2.0, e - c.bias) * (1.0 + frac);
}

class fp8_format : public ::testing::TestWithParam<format_case> {};

TEST_P(fp8_format, every_code_decodes_to_the_formula_value) {
    const format_case& c = GetParam();
    for (int code = 0; code < 256; ++code) {
        const double want = formula(static_cast<uint8_t>(code), c);
        const float got = fp8::decode(static_cast<uint8_t>(code), c.f);
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << "code " << code;
        } else {
            EXPECT_EQ(static_cast<double>(got), want) << "code " << code;
            EXPECT_EQ(std::signbit(got), (code & 0x80) != 0) << "code " << code;
        }
    }
}

TEST_P(fp8_format, every_finite_code_encodes_back_to_itself) {
    const format_case& c = GetParam();
    int n_finite = 0;
    for (int code = 0; code < 256; ++code) {
        const float v = fp8::decode(static_cast<uint8_t>(code), c.f);
        if (!std::isfinite(v)) continue;
        ++n_finite;
        EXPECT_EQ(fp8::encode(v, c.f), code) << "value " << v;
    }
    EXPECT_EQ(n_finite, c.f == format::e4m3 ? 254 : 248);  // e4m3: 2 NaNs; e5m2: 2 infinities and 6 NaNs
}

TEST_P(fp8_format, values_between_neighbours_round_to_the_nearest_and_ties_to_the_even_code) {
    const format_case& c = GetParam();
    // Every pair of neighbouring non-negative finite codes (c, c + 1): the midpoint goes to the even code, a little
    // below it to c, a little above to c + 1; the same mirrored for negative values.
    for (int code = 0; code + 1 <= fp8::traits(c.f).max_code; ++code) {
        const double lo = formula(static_cast<uint8_t>(code), c), hi = formula(static_cast<uint8_t>(code + 1), c);
        const double mid = (lo + hi) / 2, eps = (hi - lo) / 64;
        const int even = code % 2 == 0 ? code : code + 1;
        for (const int sign : {0, 0x80}) {
            const double s = sign ? -1.0 : 1.0;
            EXPECT_EQ(fp8::encode(static_cast<float>(s * mid), c.f), sign | even) << "midpoint " << s * mid;
            EXPECT_EQ(fp8::encode(static_cast<float>(s * (mid - eps)), c.f), sign | code) << "below " << s * mid;
            EXPECT_EQ(fp8::encode(static_cast<float>(s * (mid + eps)), c.f), sign | (code + 1)) << "above " << s * mid;
        }
    }
}

TEST_P(fp8_format, magnitudes_past_the_largest_finite_saturate_and_nan_stays_nan) {
    const format_case& c = GetParam();
    const uint8_t max_code = fp8::traits(c.f).max_code;
    EXPECT_EQ(fp8::decode(max_code, c.f), c.max_finite);
    for (const double v : {c.max_finite, c.max_finite * 1.03, c.max_finite * 1.2, c.max_finite * 4, 1e30,
                           static_cast<double>(std::numeric_limits<float>::infinity())}) {
        EXPECT_EQ(fp8::encode(static_cast<float>(v), c.f), max_code) << v;
        EXPECT_EQ(fp8::encode(static_cast<float>(-v), c.f), 0x80 | max_code) << -v;
    }
    EXPECT_TRUE(std::isnan(fp8::decode(fp8::encode(std::numeric_limits<float>::quiet_NaN(), c.f), c.f)));
    EXPECT_TRUE(std::isnan(fp8::decode(fp8::encode(-std::numeric_limits<float>::quiet_NaN(), c.f), c.f)));
    // Below half the smallest subnormal: zero, keeping the sign; exactly half: the tie goes to zero (even).
    const double smallest = std::pow(2.0, 1 - c.bias - c.m_bits);
    EXPECT_EQ(fp8::encode(static_cast<float>(smallest / 2), c.f), 0);
    EXPECT_EQ(fp8::encode(static_cast<float>(-smallest / 2), c.f), 0x80);
    EXPECT_EQ(fp8::encode(static_cast<float>(smallest * 0.51), c.f), 1);
    EXPECT_EQ(fp8::encode(-0.0f, c.f), 0x80);
}

INSTANTIATE_TEST_SUITE_P(fp8, fp8_format,
                         ::testing::Values(format_case{"e4m3", format::e4m3, 4, 3, 7, 448.0},
                                           format_case{"e5m2", format::e5m2, 5, 2, 15, 57344.0}),
                         [](const ::testing::TestParamInfo<format_case>& info) {
                             return std::string(info.param.name);
                         });

TEST(fp8_format_e5m2, codes_are_the_high_byte_of_the_ieee_half_with_the_same_value) {
    // The SIMD kernels rely on it: half bits = code << 8.
    for (int code = 0; code < 256; ++code) {
        const float v = fp8::decode(static_cast<uint8_t>(code), format::e5m2);
        if (std::isnan(v)) continue;
        const uint16_t h = static_cast<uint16_t>(code << 8);
        const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        const double half = (h & 0x8000 ? -1.0 : 1.0) * (e == 0x1f ? std::numeric_limits<double>::infinity()
                                                         : e == 0  ? std::ldexp(m, -24)
                                                                   : std::ldexp(1024 + m, e - 25));
        EXPECT_EQ(static_cast<double>(v), half) << "code " << code;
    }
}

}  // namespace
}  // namespace troupe::testing
