// quant/w4a16 through the ABI (the real .so): Q4_1, W4_G64 and W4_G128 weights quantized by the reference
// quantizer (kernels/ref/quants.h), multiplied by every kernel the plugin has (params.kernel: scalar, avx2,
// avx512) on odd shapes and token counts on both paths (decode <= 16 tokens, prefill above):
//   - every kernel's product equals the float product of the reference-dequantized weights within float
//     summation error;
//   - the SIMD prefill tiles sum in the scalar twin's order, so their products equal the scalar twin's bit for
//     bit; the SIMD decode kernels sum in another order and are compared within summation error;
//   - with params.activations: bf16 (the default) decode multiplies the same weights by the activations rounded to
//     bf16 (to nearest even): every kernel gives that product within the summation error of its recipe (the
//     AVX-512 BF16 kernel sums d (128 + q) x and subtracts 128 d sum x, so its error scales with that), and prefill
//     is the float product as before;
//   - with params.activations: int16 (the default with the AVX2 kernels) decode multiplies them by the activations
//     quantized per group to int16 (s = max |x| / 32767, x ~ s round(x / s): quantized here apart from the plugin),
//     and every kernel forms the recipe's float terms in the scalar twin's order: equal to it bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ref/quants.h"
#include "plugin_test_support.h"
#include "plugins/common/half.h"

namespace troupe::testing {
namespace {

struct w4_case {
    const char* name;
    ggml_type type;
    int64_t n_in, n_out, n_tokens;
    bool threaded;
};

void PrintTo(const w4_case& c, std::ostream* os) {
    *os << c.name;
}

const char* const k_kernels[] = {"scalar", "avx2", "avx512"};

// x rounded to bf16: to nearest even, denormals to zero (written here apart from the plugin's).
float to_bf16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if (std::fabs(x) < 1.17549435e-38f) return x < 0 ? -0.0f : 0.0f;
    const uint32_t lsb = (u >> 16) & 1u;
    u = (u + 0x7fffu + lsb) & 0xffff0000u;
    float r;
    std::memcpy(&r, &u, 4);
    return r;
}

struct stored_weight {
    std::vector<uint8_t> bytes;      // [n_out, row_stride]
    size_t row_stride = 0;           // the rows' bytes plus 10 spare ones, to exercise row_stride
    std::vector<float> dequantized;  // [n_out, n_in], as the reference decodes the stored rows
    std::vector<float> d, m;         // [n_out, n_in / G]: each group's scale and min
};

stored_weight quantized(const w4_case& c) {
    const std::vector<float> w =
        random_floats(static_cast<size_t>(c.n_in * c.n_out), 11 + c.n_in + c.n_out, -0.7f, 0.4f);
    stored_weight s;
    s.row_stride = row_bytes(c.type, c.n_in) + 10;
    s.bytes.assign(s.row_stride * c.n_out, 0xee);
    s.dequantized.resize(w.size());
    for (int64_t o = 0; o < c.n_out; ++o) {
        ref::quantize_row(c.type, w.data() + o * c.n_in, s.bytes.data() + o * s.row_stride, c.n_in);
        ref::dequantize_row(c.type, s.bytes.data() + o * s.row_stride, s.dequantized.data() + o * c.n_in, c.n_in);
        const int g = ref::w4_group_size(c.type);
        for (int64_t b = 0; b < c.n_in / g; ++b) {
            const uint8_t* block = s.bytes.data() + o * s.row_stride + b * (4 + g / 2);
            uint16_t dh, mh;
            std::memcpy(&dh, block, 2);
            std::memcpy(&mh, block + 2, 2);
            s.d.push_back(quant_common::fp16_to_fp32(dh));
            s.m.push_back(quant_common::fp16_to_fp32(mh));
        }
    }
    return s;
}

class w4a16_plugin : public ::testing::TestWithParam<w4_case> {};

TEST_P(w4a16_plugin, every_kernel_gives_the_float_product_of_the_dequantized_weights) {
    const w4_case& c = GetParam();
    const stored_weight s = quantized(c);
    const int g = ref::w4_group_size(c.type);
    const std::vector<float> x = random_floats(static_cast<size_t>(c.n_in * c.n_tokens), 5 + c.n_tokens, -2.0f, 2.0f);
    plugin_host host = real_plugins();
    for (const char* activations : {"float", "bf16", "int16"}) {
        SCOPED_TRACE(activations);
        // Decode with bf16 activations multiplies by x rounded to bf16, with int16 ones by x quantized per group;
        // prefill always by x.
        const bool rounded = std::string(activations) == "bf16" && c.n_tokens <= 16;
        const bool int16 = std::string(activations) == "int16" && c.n_tokens <= 16;
        std::vector<double> xa(x.begin(), x.end());
        if (rounded) {
            for (double& v : xa) v = to_bf16(static_cast<float>(v));
        }
        if (int16) {
            for (int64_t t = 0; t < c.n_tokens; ++t) {
                for (int64_t g0 = 0; g0 < c.n_in; g0 += g) {
                    double max = 0.0;
                    for (int64_t i = g0; i < g0 + g; ++i) max = std::max(max, std::fabs(xa[t * c.n_in + i]));
                    const float s_g = static_cast<float>(max) / 32767.0f, inv = 32767.0f / static_cast<float>(max);
                    for (int64_t i = g0; i < g0 + g; ++i) {
                        double& v = xa[t * c.n_in + i];
                        v = double{s_g} * std::nearbyint(static_cast<float>(v) * inv);
                    }
                }
            }
        }
        // The product in double and the scale of float summation error, per output: sum |w x| for the float
        // recipe; with bf16 activations sum |x| (|d| (128 + q) + |m - 128 d|), the terms the AVX-512 BF16 kernel sums.
        std::vector<double> exact(static_cast<size_t>(c.n_tokens * c.n_out)), magnitude(exact.size());
        for (int64_t t = 0; t < c.n_tokens; ++t) {
            for (int64_t o = 0; o < c.n_out; ++o) {
                for (int64_t i = 0; i < c.n_in; ++i) {
                    const double w = s.dequantized[o * c.n_in + i], xi = xa[t * c.n_in + i];
                    exact[t * c.n_out + o] += w * xi;
                    double scale = std::fabs(w);
                    if (rounded || int16) {
                        const double d = s.d[o * (c.n_in / g) + i / g], m = s.m[o * (c.n_in / g) + i / g];
                        const double q = std::round((w - m) / d);
                        scale = rounded ? std::fabs(d) * (128 + q) + std::fabs(m - 128 * d)
                                        : std::fabs(d) * q + std::fabs(m);
                    }
                    magnitude[t * c.n_out + o] += scale * std::fabs(xi);
                }
            }
        }
        std::vector<float> scalar_y;
        for (const char* kernel : k_kernels) {
            SCOPED_TRACE(kernel);
            auto op = host.load_quant("w4a16",
                                      yaml(std::string("{kernel: ") + kernel + ", activations: " + activations + "}"));
            if (!op.ok() && op.message().find("not available") != std::string::npos) continue;  // the CPU lacks it
            ASSERT_TRUE(op.ok()) << op.message();
            ASSERT_TRUE((*op)->claims(c.type));
            auto prepared = (*op)->prepare(weight_view{c.type, s.bytes.data(), c.n_in, c.n_out, s.row_stride});
            ASSERT_TRUE(prepared.ok()) << prepared.message();
            // Bytes read per product: 64 per started span of 128 codes, and the float32 (d, m) of every group.
            EXPECT_EQ((*prepared)->n_bytes(),
                      static_cast<size_t>(c.n_out * ((c.n_in + 127) / 128 * 64 + c.n_in / g * 8)));
            std::vector<float> y(static_cast<size_t>(c.n_tokens * c.n_out), NAN);
            const status st = (*op)->matmul(**prepared, x.data(), y.data(), c.n_tokens,
                                            c.threaded ? threaded_parallel_for() : no_parallel_for());
            ASSERT_TRUE(st.ok()) << st.message();
            for (size_t i = 0; i < y.size(); ++i) {
                ASSERT_LE(std::fabs(y[i] - exact[i]), 2e-6 * magnitude[i] + 1e-6)
                    << "token " << i / c.n_out << " output " << i % c.n_out << ": " << y[i] << " vs " << exact[i];
            }
            if (std::string(kernel) == "scalar") {
                scalar_y = y;
            } else if (c.n_tokens > 16 || int16) {
                ASSERT_EQ(0, std::memcmp(y.data(), scalar_y.data(), y.size() * sizeof(float)))
                    << (int16 ? "the int16 decode's" : "the prefill tiles'") << " sums differ from the scalar twin's";
            } else {
                for (size_t i = 0; i < y.size(); ++i) {  // another summation order: within float summation error
                    ASSERT_LE(std::fabs(y[i] - scalar_y[i]), 4e-6 * magnitude[i] + 1e-6) << "element " << i;
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    w4a16, w4a16_plugin,
    ::testing::Values(w4_case{"q4_1_32_in_1_out_1_token", ggml_type::q4_1, 32, 1, 1, false},
                      w4_case{"q4_1_96_in_7_out_3_tokens", ggml_type::q4_1, 96, 7, 3, true},
                      w4_case{"q4_1_160_in_33_out_16_tokens", ggml_type::q4_1, 160, 33, 16, true},
                      w4_case{"q4_1_1056_in_61_out_17_tokens", ggml_type::q4_1, 1056, 61, 17, true},
                      w4_case{"q4_1_64_in_50_out_40_tokens", ggml_type::q4_1, 64, 50, 40, false},
                      w4_case{"w4_g64_64_in_5_out_2_tokens", ggml_type::w4_g64, 64, 5, 2, false},
                      w4_case{"w4_g64_192_in_19_out_5_tokens", ggml_type::w4_g64, 192, 19, 5, true},
                      w4_case{"w4_g64_320_in_49_out_33_tokens", ggml_type::w4_g64, 320, 49, 33, true},
                      w4_case{"w4_g64_1088_in_13_out_4_tokens", ggml_type::w4_g64, 1088, 13, 4, true},
                      w4_case{"w4_g128_128_in_3_out_1_token", ggml_type::w4_g128, 128, 3, 1, false},
                      w4_case{"w4_g128_384_in_17_out_7_tokens", ggml_type::w4_g128, 384, 17, 7, true},
                      w4_case{"w4_g128_1152_in_53_out_40_tokens", ggml_type::w4_g128, 1152, 53, 40, true},
                      w4_case{"w4_g128_256_in_97_out_21_tokens", ggml_type::w4_g128, 256, 97, 21, false},
                      // Decode of several tokens whose activations overflow L1 sweeps rows in chunks of 1024 columns.
                      w4_case{"w4_g128_2304_in_9_out_5_tokens_chunked", ggml_type::w4_g128, 2304, 9, 5, true},
                      w4_case{"q4_1_2080_in_18_out_7_tokens_chunked_short_span", ggml_type::q4_1, 2080, 18, 7, true}),
    [](const ::testing::TestParamInfo<w4_case>& info) { return std::string(info.param.name); });

TEST(w4a16_plugin_claims, the_three_group_formats_and_nothing_else) {
    plugin_host host = real_plugins();
    auto op = host.load_quant("w4a16");
    ASSERT_TRUE(op.ok()) << op.message();
    EXPECT_TRUE((*op)->claims(ggml_type::q4_1));
    EXPECT_TRUE((*op)->claims(ggml_type::w4_g64));
    EXPECT_TRUE((*op)->claims(ggml_type::w4_g128));
    for (ggml_type t : {ggml_type::f32, ggml_type::f16, ggml_type::q4_0, ggml_type::q8_0, ggml_type::q4_k}) {
        EXPECT_FALSE((*op)->claims(t)) << traits(t).name;
    }
}

TEST(w4a16_plugin_refusals, bad_params_and_rows_that_are_not_whole_groups_are_refused_with_their_reason) {
    plugin_host host = real_plugins();
    auto bad_kernel = host.load_quant("w4a16", yaml("{kernel: neon}"));
    ASSERT_FALSE(bad_kernel.ok());
    EXPECT_NE(bad_kernel.message().find("params.kernel"), std::string::npos) << bad_kernel.message();
    auto unknown = host.load_quant("w4a16", yaml("{group: 64}"));
    ASSERT_FALSE(unknown.ok());
    EXPECT_NE(unknown.message().find("params.group"), std::string::npos) << unknown.message();

    auto op = host.load_quant("w4a16");
    ASSERT_TRUE(op.ok()) << op.message();
    std::vector<uint8_t> bytes(4096, 0);
    auto partial = (*op)->prepare(weight_view{ggml_type::w4_g128, bytes.data(), 192, 2, 204});
    ASSERT_FALSE(partial.ok());
    EXPECT_NE(partial.message().find("multiple of 128"), std::string::npos) << partial.message();
    auto short_stride = (*op)->prepare(weight_view{ggml_type::q4_1, bytes.data(), 64, 2, 39});
    ASSERT_FALSE(short_stride.ok());
    EXPECT_NE(short_stride.message().find("at least 40 bytes"), std::string::npos) << short_stride.message();
    auto other = (*op)->prepare(weight_view{ggml_type::q8_0, bytes.data(), 64, 2, 68});
    ASSERT_FALSE(other.ok());
    EXPECT_NE(other.message().find("Q4_1, W4_G64 and W4_G128"), std::string::npos) << other.message();
}

}  // namespace
}  // namespace troupe::testing
