// quant/fp8 through the ABI (the built .so): F32 / F16 / BF16 weights quantized at load to E4M3 or E5M2 with one
// scale per row, multiplied by every kernel (scalar, avx2, avx512) on odd shapes and token counts 1..40, against
//   (a) the dequantize-then-multiply product computed here in double from the test's own quantization (fp8.h, which
//       test_fp8_format.cpp checks code by code), within float summation error, and
//   (b) the scalar twin, within the same bound;
// plus claims, prepared bytes and the refusals (parameters, non-finite weights).
#include <cmath>
#include <cstring>

#include <xmmintrin.h>

#include "kernels/fp16.h"
#include "kernels/ggml_types.h"
#include "plugin_test_support.h"
#include "plugins/common/fp8.h"

namespace troupe::testing {
namespace {

bool cpu_has(const std::string& kernel) {
    if (kernel == "avx512") return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2");
    if (kernel == "avx2") {
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    }
    return true;
}

struct stored_weight {
    std::vector<uint8_t> bytes;
    size_t row_stride = 0;
    std::vector<float> values;  // [n_out, n_in] the weights as stored, in float
};

// Random weights stored as `type`, rows `pad` bytes longer than needed (row_stride is honoured). Rows get different
// magnitudes so per-row scales matter, and a few large outliers.
stored_weight make_weight(ggml_type type, int64_t n_in, int64_t n_out, uint32_t seed) {
    stored_weight w;
    w.values = random_floats(static_cast<size_t>(n_in * n_out), seed, -1.0f, 1.0f);
    for (int64_t o = 0; o < n_out; ++o) {
        const float row_scale = std::ldexp(1.0f, static_cast<int>(o % 7) - 4);
        for (int64_t i = 0; i < n_in; ++i) w.values[o * n_in + i] *= row_scale;
        if (o % 5 == 2) w.values[o * n_in + (o * 13) % n_in] = 9.0f * row_scale;
    }
    const size_t elem = type == ggml_type::f32 ? 4 : 2;
    w.row_stride = elem * n_in + 6;
    w.bytes.assign(w.row_stride * n_out, 0xee);
    for (int64_t o = 0; o < n_out; ++o) {
        uint8_t* row = w.bytes.data() + o * w.row_stride;
        for (int64_t i = 0; i < n_in; ++i) {
            float& v = w.values[o * n_in + i];
            if (type == ggml_type::f32) {
                std::memcpy(row + 4 * i, &v, 4);
            } else {
                const uint16_t h = type == ggml_type::f16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
                std::memcpy(row + 2 * i, &h, 2);
                v = type == ggml_type::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
            }
        }
    }
    return w;
}

// The weights as the plugin should hold them: per row, scale = max|w| / max_finite, decode(encode(w / scale)) *
// scale.
std::vector<double> dequantized(const std::vector<float>& w, int64_t n_in, int64_t n_out, fp8::format f) {
    std::vector<double> out(w.size());
    for (int64_t o = 0; o < n_out; ++o) {
        float amax = 0.0f;
        for (int64_t i = 0; i < n_in; ++i) amax = std::max(amax, std::fabs(w[o * n_in + i]));
        const float scale = amax / fp8::traits(f).max_finite;
        for (int64_t i = 0; i < n_in; ++i) {
            const uint8_t code = scale > 0.0f ? fp8::encode(w[o * n_in + i] / scale, f) : 0;
            out[o * n_in + i] = static_cast<double>(fp8::decode(code, f)) * scale;
        }
    }
    return out;
}

struct fp8_case {
    const char* name;
    ggml_type type;
    int64_t n_in, n_out;
    const char* format;
};

void PrintTo(const fp8_case& c, std::ostream* os) {
    *os << c.name;
}

class fp8_plugin : public ::testing::TestWithParam<fp8_case> {};

TEST_P(fp8_plugin, every_kernel_matches_the_dequantized_product_and_the_scalar_twin_at_every_token_count) {
    const fp8_case& c = GetParam();
    const stored_weight w = make_weight(c.type, c.n_in, c.n_out, static_cast<uint32_t>(c.n_in * 31 + c.n_out));
    const std::vector<double> wd =
        dequantized(w.values, c.n_in, c.n_out, std::string(c.format) == "e5m2" ? fp8::format::e5m2 : fp8::format::e4m3);
    const int64_t max_tokens = 40;
    const std::vector<float> x = random_floats(static_cast<size_t>(max_tokens * c.n_in), 5 + c.n_out, -2.0f, 2.0f);

    plugin_host host = real_plugins();
    std::vector<std::vector<float>> scalar_y(max_tokens + 1);  // per token count, the scalar twin's product
    for (const std::string kernel : {"scalar", "avx2", "avx512"}) {
        if (!cpu_has(kernel)) {
            std::printf("skipping kernel %s: this CPU lacks it\n", kernel.c_str());
            continue;
        }
        SCOPED_TRACE("kernel " + kernel);
        auto op = host.load_quant("fp8", yaml("{format: " + std::string(c.format) + ", kernel: " + kernel + "}"));
        ASSERT_TRUE(op.ok()) << op.message();
        ASSERT_TRUE((*op)->claims(c.type));
        auto prepared = (*op)->prepare(weight_view{c.type, w.bytes.data(), c.n_in, c.n_out, w.row_stride});
        ASSERT_TRUE(prepared.ok()) << prepared.message();
        const int64_t rows = (c.n_out + 31) / 32 * 32;  // panels of 32 rows
        EXPECT_EQ((*prepared)->n_bytes(), static_cast<size_t>((rows * c.n_in + 63) / 64 * 64 + rows * 4));

        for (const int64_t n_tokens : {1, 2, 3, 4, 5, 7, 12, 13, 16, 17, 25, 40}) {
            SCOPED_TRACE(std::to_string(n_tokens) + " tokens");
            std::vector<float> y(static_cast<size_t>(n_tokens * c.n_out), NAN);
            const bool threaded = n_tokens % 2 == 1;
            const status st = (*op)->matmul(**prepared, x.data(), y.data(), n_tokens,
                                            threaded ? threaded_parallel_for() : no_parallel_for());
            ASSERT_TRUE(st.ok()) << st.message();
            if (kernel == "scalar") scalar_y[n_tokens] = y;
            for (int64_t t = 0; t < n_tokens; ++t) {
                for (int64_t o = 0; o < c.n_out; ++o) {
                    double exact = 0.0, magnitude = 0.0;
                    for (int64_t i = 0; i < c.n_in; ++i) {
                        exact += wd[o * c.n_in + i] * x[t * c.n_in + i];
                        magnitude += std::fabs(wd[o * c.n_in + i] * x[t * c.n_in + i]);
                    }
                    // Float sums of n_in products and the final scale multiply: a few ulps of the magnitude.
                    const double bound = 1e-5 * magnitude + 1e-7;
                    const float got = y[t * c.n_out + o];
                    ASSERT_LE(std::fabs(got - exact), bound)
                        << "token " << t << " output " << o << ": " << got << " vs " << exact;
                    if (kernel != "scalar") {
                        ASSERT_LE(std::fabs(got - scalar_y[n_tokens][t * c.n_out + o]), 2 * bound)
                            << "token " << t << " output " << o << " against the scalar twin";
                    }
                }
            }
        }
    }
}

// n_in: 172 (stories260K's ffn_down rows), below and above 16, one k block and several (256 per block with several
// token tiles, 1024 with one); n_out not a multiple of 16, last panels of 1 to 18 rows (one 16-row half or two), a
// single row.
INSTANTIATE_TEST_SUITE_P(fp8, fp8_plugin,
                         ::testing::Values(fp8_case{"f32_e4m3_172_in_37_out", ggml_type::f32, 172, 37, "e4m3"},
                                           fp8_case{"f32_e5m2_172_in_37_out", ggml_type::f32, 172, 37, "e5m2"},
                                           fp8_case{"f16_e4m3_64_in_16_out", ggml_type::f16, 64, 16, "e4m3"},
                                           fp8_case{"bf16_e4m3_13_in_50_out", ggml_type::bf16, 13, 50, "e4m3"},
                                           fp8_case{"f16_e5m2_600_in_33_out", ggml_type::f16, 600, 33, "e5m2"},
                                           fp8_case{"f32_e4m3_300_in_1_out", ggml_type::f32, 300, 1, "e4m3"},
                                           fp8_case{"f32_e4m3_1100_in_40_out", ggml_type::f32, 1100, 40, "e4m3"},
                                           fp8_case{"bf16_e5m2_1_in_70_out", ggml_type::bf16, 1, 70, "e5m2"}),
                         [](const ::testing::TestParamInfo<fp8_case>& info) { return std::string(info.param.name); });

TEST(fp8_plugin_claims, float_matrices_are_claimed_and_quantized_types_are_not) {
    plugin_host host = real_plugins();
    auto op = host.load_quant("fp8");
    ASSERT_TRUE(op.ok()) << op.message();
    EXPECT_TRUE((*op)->claims(ggml_type::f32));
    EXPECT_TRUE((*op)->claims(ggml_type::f16));
    EXPECT_TRUE((*op)->claims(ggml_type::bf16));
    EXPECT_FALSE((*op)->claims(ggml_type::q8_0));
    EXPECT_FALSE((*op)->claims(ggml_type::q4_0));
    EXPECT_FALSE((*op)->claims(ggml_type::q6_k));
}

TEST(fp8_plugin_claims, a_row_of_zeros_gives_zeros) {
    plugin_host host = real_plugins();
    auto op = host.load_quant("fp8");
    ASSERT_TRUE(op.ok()) << op.message();
    std::vector<float> w(3 * 20, 0.5f);
    std::fill(w.begin() + 20, w.begin() + 40, 0.0f);  // row 1
    auto prepared = (*op)->prepare(weight_view{ggml_type::f32, w.data(), 20, 3, 20 * sizeof(float)});
    ASSERT_TRUE(prepared.ok()) << prepared.message();
    const std::vector<float> x(20, 1.0f);
    std::vector<float> y(3, NAN);
    ASSERT_TRUE((*op)->matmul(**prepared, x.data(), y.data(), 1, no_parallel_for()).ok());
    EXPECT_FLOAT_EQ(y[0], 10.0f);
    EXPECT_EQ(y[1], 0.0f);
    EXPECT_FLOAT_EQ(y[2], 10.0f);
}

// Subnormal fp8 codes decode exactly in every kernel, also when the calling thread has DAZ set (the AVX-512 e4m3
// path goes through float subnormals and must notice). Row 0: the format's largest value (scale 1), then subnormal
// values; x weights them so the exact product is a small power of two.
TEST(fp8_plugin_subnormals, subnormal_codes_decode_exactly_with_and_without_denormals_are_zero) {
    struct format_case {
        const char* format;
        float max, smallest;  // largest finite, smallest subnormal
    };
    const unsigned saved_csr = _mm_getcsr();
    for (const format_case f : {format_case{"e4m3", 448.0f, 0x1p-9f}, format_case{"e5m2", 57344.0f, 0x1p-16f}}) {
        const int64_t n_in = 21, n_out = 18;  // two 16-row halves in the panel
        std::vector<float> w(n_in * n_out, 0.0f);
        for (int64_t o = 0; o < n_out; ++o) {
            w[o * n_in + 0] = f.max;
            w[o * n_in + 3] = 4 * f.smallest;
            w[o * n_in + 9] = f.smallest;
            w[o * n_in + 20] = -3 * f.smallest;
        }
        std::vector<float> x(n_in, 1.0f);
        x[0] = 0.0f;
        const float want = 2 * f.smallest;  // 4 + 1 - 3 smallest
        plugin_host host = real_plugins();
        for (const std::string kernel : {"scalar", "avx2", "avx512"}) {
            if (!cpu_has(kernel)) continue;
            auto op = host.load_quant("fp8", yaml("{format: " + std::string(f.format) + ", kernel: " + kernel + "}"));
            ASSERT_TRUE(op.ok()) << op.message();
            auto prepared = (*op)->prepare(weight_view{ggml_type::f32, w.data(), n_in, n_out, n_in * sizeof(float)});
            ASSERT_TRUE(prepared.ok()) << prepared.message();
            for (const bool daz : {false, true}) {
                _mm_setcsr(daz ? (saved_csr | 0x0040) : (saved_csr & ~0x0040u));
                std::vector<float> y(n_out, NAN);
                const status st = (*op)->matmul(**prepared, x.data(), y.data(), 1, no_parallel_for());
                _mm_setcsr(saved_csr);
                ASSERT_TRUE(st.ok()) << st.message();
                for (int64_t o = 0; o < n_out; ++o) {
                    EXPECT_EQ(y[o], want)
                        << f.format << " kernel " << kernel << (daz ? " with DAZ" : "") << " row " << o;
                }
            }
        }
    }
}

// The AVX-512 kernel packs the activations times 2^64 and its products run 2^-56 / 2^-48 small (x_prescale): very
// large and very small activations (1e-12 .. 1e12) still give the dequantized product within float rounding.
TEST(fp8_plugin_ranges, activations_from_1e_minus_12_to_1e12_keep_full_precision_in_every_kernel) {
    const int64_t n_in = 40, n_out = 35;
    const stored_weight w = make_weight(ggml_type::f32, n_in, n_out, 11);
    plugin_host host = real_plugins();
    for (const char* format : {"e4m3", "e5m2"}) {
        const std::vector<double> wd =
            dequantized(w.values, n_in, n_out, std::string(format) == "e5m2" ? fp8::format::e5m2 : fp8::format::e4m3);
        for (const float magnitude : {1e-12f, 1e-6f, 1e6f, 1e12f}) {
            std::vector<float> x = random_floats(static_cast<size_t>(2 * n_in), 3, -1.0f, 1.0f);
            for (float& v : x) v *= magnitude;
            for (const std::string kernel : {"scalar", "avx2", "avx512"}) {
                if (!cpu_has(kernel)) continue;
                auto op = host.load_quant("fp8", yaml("{format: " + std::string(format) + ", kernel: " + kernel + "}"));
                ASSERT_TRUE(op.ok()) << op.message();
                auto prepared = (*op)->prepare(weight_view{ggml_type::f32, w.bytes.data(), n_in, n_out, w.row_stride});
                ASSERT_TRUE(prepared.ok()) << prepared.message();
                for (const int64_t n_tokens : {1, 2}) {
                    std::vector<float> y(static_cast<size_t>(n_tokens * n_out), NAN);
                    ASSERT_TRUE((*op)->matmul(**prepared, x.data(), y.data(), n_tokens, no_parallel_for()).ok());
                    for (int64_t t = 0; t < n_tokens; ++t) {
                        for (int64_t o = 0; o < n_out; ++o) {
                            double exact = 0.0, sum_abs = 0.0;
                            for (int64_t i = 0; i < n_in; ++i) {
                                exact += wd[o * n_in + i] * x[t * n_in + i];
                                sum_abs += std::fabs(wd[o * n_in + i] * x[t * n_in + i]);
                            }
                            ASSERT_LE(std::fabs(y[t * n_out + o] - exact), 1e-5 * sum_abs)
                                << format << " kernel " << kernel << " |x| ~ " << magnitude << " token " << t
                                << " output " << o;
                        }
                    }
                }
            }
        }
    }
}

struct refusal_case {
    const char* name;
    const char* params;
    const char* message;  // a part of the expected message
};

void PrintTo(const refusal_case& c, std::ostream* os) {
    *os << c.name;
}

class fp8_plugin_refusals : public ::testing::TestWithParam<refusal_case> {};

TEST_P(fp8_plugin_refusals, bad_parameters_are_refused_with_the_key_named) {
    plugin_host host = real_plugins();
    auto op = host.load_quant("fp8", yaml(GetParam().params));
    ASSERT_FALSE(op.ok());
    EXPECT_NE(op.message().find(GetParam().message), std::string::npos) << op.message();
}

INSTANTIATE_TEST_SUITE_P(
    fp8, fp8_plugin_refusals,
    ::testing::Values(
        refusal_case{"unknown_key", "{bits: 8}", "params.bits: unknown key (valid keys: format, kernel)"},
        refusal_case{"unknown_format", "{format: e3m4}", "params.format: must be one of e4m3, e5m2, got 'e3m4'"},
        refusal_case{"unknown_kernel", "{kernel: neon}",
                     "params.kernel: must be one of auto, scalar, avx2, avx512, got 'neon'"},
        refusal_case{"every_problem_at_once", "{format: fp8, kernel: x}", "params.format: must be one of"}),
    [](const ::testing::TestParamInfo<refusal_case>& info) { return std::string(info.param.name); });

TEST(fp8_plugin_refusals, weights_holding_nan_or_infinity_are_refused_with_the_row) {
    plugin_host host = real_plugins();
    auto op = host.load_quant("fp8");
    ASSERT_TRUE(op.ok()) << op.message();
    for (const float bad : {NAN, INFINITY}) {
        std::vector<float> w(4 * 8, 0.25f);
        w[2 * 8 + 5] = bad;
        auto prepared = (*op)->prepare(weight_view{ggml_type::f32, w.data(), 8, 4, 8 * sizeof(float)});
        ASSERT_FALSE(prepared.ok());
        EXPECT_NE(prepared.message().find("F32 weight [4, 8]: row 2 holds a NaN or an infinity"), std::string::npos)
            << prepared.message();
    }
}

}  // namespace
}  // namespace troupe::testing
