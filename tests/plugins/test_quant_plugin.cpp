// quant/q8 through the ABI: Q8_0 tensors used as stored, F32/F16 weights quantized online, in both recipes:
//   - activations: float (W8A16, the default): the float product of the Q8_0 weights (as dequantized) with the
//     float activations, within float summation error;
//   - activations: int8 (W8A8): (a) the integer recipe computed here from the test's own Q8_0 quantizer and
//     (b) the float product within the error bound of 8-bit groups.
#include <dlfcn.h>

#include <cmath>
#include <cstring>

#include "kernels/fp16.h"
#include "kernels/ggml_types.h"
#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

// ggml's Q8_0 recipe, written out again for the test.
std::vector<block_q8_0> quantize_q8_0(const float* x, int64_t n) {
    std::vector<block_q8_0> out(n / 32);
    for (int64_t b = 0; b < n / 32; ++b) {
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        out[b].d = fp32_to_fp16(d);
        for (int i = 0; i < 32; ++i) out[b].qs[i] = static_cast<int8_t>(std::round(x[b * 32 + i] * id));
    }
    return out;
}

// y = x * W^T with W and x both quantized to Q8_0 (rows zero-padded to n_pad), integer dots per block.
std::vector<float> reference_q8_product(const std::vector<float>& w, const std::vector<float>& x, int64_t n_in,
                                        int64_t n_out, int64_t n_tokens) {
    const int64_t n_pad = (n_in + 31) / 32 * 32;
    auto pad = [&](const float* row) {
        std::vector<float> r(n_pad, 0.0f);
        std::copy(row, row + n_in, r.begin());
        return quantize_q8_0(r.data(), n_pad);
    };
    std::vector<float> y(n_tokens * n_out);
    for (int64_t t = 0; t < n_tokens; ++t) {
        const auto xq = pad(x.data() + t * n_in);
        for (int64_t o = 0; o < n_out; ++o) {
            const auto wq = pad(w.data() + o * n_in);
            double sum = 0.0;
            for (size_t b = 0; b < wq.size(); ++b) {
                int32_t isum = 0;
                for (int i = 0; i < 32; ++i) isum += int32_t{wq[b].qs[i]} * xq[b].qs[i];
                sum += static_cast<double>(isum) * fp16_to_fp32(wq[b].d) * fp16_to_fp32(xq[b].d);
            }
            y[t * n_out + o] = static_cast<float>(sum);
        }
    }
    return y;
}

struct quant_case {
    const char* name;
    ggml_type type;  // as stored: q8_0, f32 or f16
    int64_t n_in, n_out, n_tokens;
    bool threaded;
    bool int8_activations;  // params.activations: int8 (W8A8), else float (W8A16)
};

void PrintTo(const quant_case& c, std::ostream* os) {
    *os << c.name;
}

class quant_plugin : public ::testing::TestWithParam<quant_case> {};

TEST_P(quant_plugin, products_match_their_recipe_and_the_float_product_within_its_bound) {
    const quant_case& c = GetParam();
    plugin_host host = real_plugins();
    auto op = host.load_quant("q8", yaml(c.int8_activations ? "{online: true, activations: int8}" : "{online: true}"));
    ASSERT_TRUE(op.ok()) << op.message();
    ASSERT_TRUE((*op)->claims(c.type));

    std::vector<float> w = random_floats(c.n_in * c.n_out, 7 + c.n_in, -0.5f, 0.5f);
    const std::vector<float> x = random_floats(c.n_in * c.n_tokens, 9 + c.n_out, -3.0f, 3.0f);
    // Storage as the file would have it; Q8_0 rows get 6 spare bytes to exercise row_stride.
    std::vector<uint8_t> stored;
    size_t row_stride = 0;
    if (c.type == ggml_type::q8_0) {
        row_stride = c.n_in / 32 * sizeof(block_q8_0) + 6;
        stored.resize(row_stride * c.n_out);
        for (int64_t o = 0; o < c.n_out; ++o) {
            const auto q = quantize_q8_0(w.data() + o * c.n_in, c.n_in);
            std::memcpy(stored.data() + o * row_stride, q.data(), q.size() * sizeof(block_q8_0));
            std::vector<float> back(c.n_in);  // the float weights are what was stored
            for (int64_t i = 0; i < c.n_in; ++i) back[i] = fp16_to_fp32(q[i / 32].d) * q[i / 32].qs[i % 32];
            std::copy(back.begin(), back.end(), w.begin() + o * c.n_in);
        }
    } else if (c.type == ggml_type::f16) {
        row_stride = c.n_in * 2;
        stored.resize(row_stride * c.n_out);
        auto* h = reinterpret_cast<uint16_t*>(stored.data());
        for (size_t i = 0; i < w.size(); ++i) {
            h[i] = fp32_to_fp16(w[i]);
            w[i] = fp16_to_fp32(h[i]);
        }
    } else {
        row_stride = c.n_in * 4;
        stored.resize(row_stride * c.n_out);
        std::memcpy(stored.data(), w.data(), stored.size());
    }

    auto prepared = (*op)->prepare(weight_view{c.type, stored.data(), c.n_in, c.n_out, row_stride});
    ASSERT_TRUE(prepared.ok()) << prepared.message();
    EXPECT_EQ((*prepared)->n_bytes(), static_cast<size_t>(c.n_out * ((c.n_in + 31) / 32)) * sizeof(block_q8_0));

    std::vector<float> y(c.n_tokens * c.n_out, NAN);
    const status st = (*op)->matmul(**prepared, x.data(), y.data(), c.n_tokens,
                                    c.threaded ? threaded_parallel_for() : no_parallel_for());
    ASSERT_TRUE(st.ok()) << st.message();

    if (!c.int8_activations) {
        // W8A16: w holds the stored weights as the plugin dequantizes them (Q8_0 ones exactly; online-quantized
        // F32/F16 ones are compared with the float product of their own Q8_0 blocks).
        for (int64_t o = 0; o < c.n_out; ++o) {
            if (c.type == ggml_type::q8_0) break;
            const int64_t n_pad = (c.n_in + 31) / 32 * 32;
            std::vector<float> r(n_pad, 0.0f);
            std::copy(w.begin() + o * c.n_in, w.begin() + (o + 1) * c.n_in, r.begin());
            const auto q = quantize_q8_0(r.data(), n_pad);
            for (int64_t i = 0; i < c.n_in; ++i) w[o * c.n_in + i] = fp16_to_fp32(q[i / 32].d) * q[i / 32].qs[i % 32];
        }
        for (int64_t t = 0; t < c.n_tokens; ++t) {
            for (int64_t o = 0; o < c.n_out; ++o) {
                double exact = 0.0, magnitude = 0.0;
                for (int64_t i = 0; i < c.n_in; ++i) {
                    exact += double{w[o * c.n_in + i]} * x[t * c.n_in + i];
                    magnitude += std::fabs(double{w[o * c.n_in + i]} * x[t * c.n_in + i]);
                }
                ASSERT_LE(std::fabs(y[t * c.n_out + o] - exact), 1e-5 * magnitude + 1e-7)
                    << "token " << t << " output " << o << ": " << y[t * c.n_out + o] << " vs " << exact;
            }
        }
        return;
    }
    const std::vector<float> recipe = reference_q8_product(w, x, c.n_in, c.n_out, c.n_tokens);
    for (int64_t t = 0; t < c.n_tokens; ++t) {
        for (int64_t o = 0; o < c.n_out; ++o) {
            const float got = y[t * c.n_out + o];
            ASSERT_NEAR(got, recipe[t * c.n_out + o], 1e-4f + 1e-5f * std::fabs(recipe[t * c.n_out + o]))
                << "token " << t << " output " << o;
            // Float product and the bound of two 8-bit roundings (half a step each, fp16 scales).
            double exact = 0.0, bound = 0.0;
            for (int64_t b = 0; b < (c.n_in + 31) / 32; ++b) {
                float amax_w = 0.0f, amax_x = 0.0f;
                for (int64_t i = b * 32; i < std::min(c.n_in, b * 32 + 32); ++i) {
                    amax_w = std::max(amax_w, std::fabs(w[o * c.n_in + i]));
                    amax_x = std::max(amax_x, std::fabs(x[t * c.n_in + i]));
                }
                for (int64_t i = b * 32; i < std::min(c.n_in, b * 32 + 32); ++i) {
                    const double wi = w[o * c.n_in + i], xi = x[t * c.n_in + i];
                    exact += wi * xi;
                    bound += std::fabs(xi) * (amax_w / 254.0 * 1.01 + std::fabs(wi) / 1024) +
                             (std::fabs(wi) + amax_w / 254.0) * (amax_x / 254.0 * 1.01 + std::fabs(xi) / 1024);
                }
            }
            ASSERT_LE(std::fabs(got - exact), bound + 1e-4) << "token " << t << " output " << o;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    q8, quant_plugin,
    ::testing::Values(quant_case{"q8_0_64_in_7_out_1_token_int8", ggml_type::q8_0, 64, 7, 1, false, true},
                      quant_case{"q8_0_256_in_33_out_5_tokens_int8", ggml_type::q8_0, 256, 33, 5, true, true},
                      quant_case{"q8_0_96_in_40_out_37_tokens_int8", ggml_type::q8_0, 96, 40, 37, true, true},
                      quant_case{"f32_online_128_in_9_out_3_tokens_int8", ggml_type::f32, 128, 9, 3, false, true},
                      quant_case{"f32_online_256_in_64_out_40_tokens_int8", ggml_type::f32, 256, 64, 40, true, true},
                      quant_case{"f16_online_64_in_16_out_2_tokens_int8", ggml_type::f16, 64, 16, 2, true, true},
                      quant_case{"f16_online_172_in_rows_padded_to_192_int8", ggml_type::f16, 172, 11, 4, true, true},
                      quant_case{"f32_online_20_in_shorter_than_a_block_int8", ggml_type::f32, 20, 3, 2, false, true},
                      quant_case{"q8_0_64_in_7_out_1_token_float", ggml_type::q8_0, 64, 7, 1, false, false},
                      quant_case{"q8_0_256_in_33_out_5_tokens_float", ggml_type::q8_0, 256, 33, 5, true, false},
                      quant_case{"q8_0_96_in_40_out_37_tokens_float", ggml_type::q8_0, 96, 40, 37, true, false},
                      quant_case{"f32_online_128_in_9_out_3_tokens_float", ggml_type::f32, 128, 9, 3, false, false},
                      quant_case{"f32_online_256_in_64_out_40_tokens_float", ggml_type::f32, 256, 64, 40, true, false},
                      quant_case{"f16_online_64_in_16_out_2_tokens_float", ggml_type::f16, 64, 16, 2, true, false},
                      quant_case{"f16_online_172_in_rows_padded_to_192_float", ggml_type::f16, 172, 11, 4, true, false},
                      quant_case{"f32_online_20_in_shorter_than_a_block_float", ggml_type::f32, 20, 3, 2, false,
                                 false}),
    [](const ::testing::TestParamInfo<quant_case>& info) { return std::string(info.param.name); });

TEST(quant_plugin_claims, without_online_quantization_only_q8_0_is_claimed) {
    plugin_host host = real_plugins();
    auto stored = host.load_quant("q8");
    auto online = host.load_quant("q8", yaml("{online: true}"));
    ASSERT_TRUE(stored.ok()) << stored.message();
    ASSERT_TRUE(online.ok()) << online.message();
    EXPECT_TRUE((*stored)->claims(ggml_type::q8_0));
    EXPECT_FALSE((*stored)->claims(ggml_type::f32));
    EXPECT_FALSE((*stored)->claims(ggml_type::f16));
    EXPECT_TRUE((*online)->claims(ggml_type::f32));
    EXPECT_TRUE((*online)->claims(ggml_type::f16));
    EXPECT_TRUE((*online)->claims(ggml_type::bf16));
    EXPECT_FALSE((*online)->claims(ggml_type::q4_0));
    EXPECT_FALSE((*online)->claims(ggml_type::q6_k));
}

TEST(quant_plugin_params, activations_default_to_float_and_int8_selects_the_integer_recipe) {
    // One block whose activations do not survive 8-bit rounding: 0.001 next to 1.0 (Q8_0 rounds it to 0).
    std::vector<float> wf(32, 0.0f), x(32, 0.0f);
    wf[0] = 1.0f;
    wf[1] = 1.0f;
    x[0] = 1.0f;
    x[1] = 0.001f;
    const auto q = quantize_q8_0(wf.data(), 32);
    const weight_view view{ggml_type::q8_0, q.data(), 32, 1, sizeof(block_q8_0)};
    plugin_host host = real_plugins();
    for (const char* params : {"{}", "{activations: float}", "{activations: int8}"}) {
        SCOPED_TRACE(params);
        auto op = host.load_quant("q8", yaml(params));
        ASSERT_TRUE(op.ok()) << op.message();
        auto w = (*op)->prepare(view);
        ASSERT_TRUE(w.ok()) << w.message();
        float y = NAN;
        ASSERT_TRUE((*op)->matmul(**w, x.data(), &y, 1, no_parallel_for()).ok());
        const float wd = fp16_to_fp32(q[0].d) * q[0].qs[0];  // both weights, as stored
        if (std::string(params).find("int8") != std::string::npos) {
            EXPECT_NEAR(y, wd, 2e-4f);  // 0.001 quantized away (and 1.0 rounded through an fp16 scale)
        } else {
            EXPECT_NEAR(y, wd * 1.001f, 1e-6f);
        }
    }
}

TEST(quant_plugin_params, an_unknown_activations_choice_is_refused_with_the_valid_ones) {
    plugin_host host = real_plugins();
    auto op = host.load_quant("q8", yaml("{activations: fp8}"));
    ASSERT_FALSE(op.ok());
    EXPECT_NE(op.message().find("params.activations: must be one of"), std::string::npos) << op.message();
    EXPECT_NE(op.message().find("float"), std::string::npos) << op.message();
    EXPECT_NE(op.message().find("int8"), std::string::npos) << op.message();
}

TEST(quant_plugin_claims, preparing_an_unclaimed_type_fails_with_the_types_it_takes) {
    plugin_host host = real_plugins();
    auto op = host.load_quant("q8");
    ASSERT_TRUE(op.ok()) << op.message();
    std::vector<uint8_t> data(18 * 4);
    auto r = (*op)->prepare(weight_view{ggml_type::q4_0, data.data(), 64, 2, 36});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(),
              "plugin quant/q8: prepare failed: Q4_0 weights are not taken by quant/q8 (it takes Q8_0; "
              "F32, F16 and BF16 with params.online: true)");
    std::vector<float> f(64 * 2);
    auto r2 = (*op)->prepare(weight_view{ggml_type::f32, f.data(), 64, 2, 256});
    ASSERT_FALSE(r2.ok());
    EXPECT_NE(r2.message().find("F32 weights are not taken"), std::string::npos) << r2.message();
}

TEST(quant_plugin_claims, a_q8_0_weight_whose_rows_are_not_whole_blocks_is_refused) {
    plugin_host host = real_plugins();
    auto op = host.load_quant("q8");
    ASSERT_TRUE(op.ok()) << op.message();
    std::vector<uint8_t> data(34 * 8);
    auto r = (*op)->prepare(weight_view{ggml_type::q8_0, data.data(), 40, 2, 68});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("Q8_0 weight [2, 40]"), std::string::npos) << r.message();
}

TEST(quant_plugin_lifetime, a_weight_prepared_by_another_instance_is_refused_by_matmul) {
    plugin_host host = real_plugins();
    auto a = host.load_quant("q8");
    auto b = host.load_quant("q8");
    ASSERT_TRUE(a.ok() && b.ok());
    auto q = quantize_q8_0(random_floats(32, 1).data(), 32);
    auto w = (*a)->prepare(weight_view{ggml_type::q8_0, q.data(), 32, 1, sizeof(block_q8_0)});
    ASSERT_TRUE(w.ok()) << w.message();
    std::vector<float> x(32, 1.0f), y(1);
    const status st = (*b)->matmul(**w, x.data(), y.data(), 1, no_parallel_for());
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.message(), "plugin quant/q8: matmul got a weight prepared by another quant op");
}

TEST(quant_plugin_lifetime, a_prepared_weight_keeps_the_library_loaded_after_the_host_and_op_are_gone) {
    const std::string path = std::string(TROUPE_DEFAULT_PLUGIN_DIR) + "/quant/libtroupe_quant_q8.so";
    std::shared_ptr<const prepared_weight> weight;
    auto q = quantize_q8_0(random_floats(64, 2).data(), 64);
    {
        plugin_host host = real_plugins();
        auto op = host.load_quant("q8");
        ASSERT_TRUE(op.ok()) << op.message();
        auto w = (*op)->prepare(weight_view{ggml_type::q8_0, q.data(), 64, 1, 2 * sizeof(block_q8_0)});
        ASSERT_TRUE(w.ok()) << w.message();
        weight = *w;
    }  // host and op gone
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    EXPECT_NE(h, nullptr) << path << " was unloaded while a prepared weight lives";
    if (h != nullptr) dlclose(h);
    EXPECT_EQ(weight->n_bytes(), 2 * sizeof(block_q8_0));
    weight.reset();  // releases through the plugin, then closes the library: must not crash
}

}  // namespace
}  // namespace troupe::testing
