// quant/q8 on real weights: the Q8_0 tensors of stories260K-Q8_0.gguf used as stored, and the F32
// tensors of stories260K.gguf quantized online, against the recipe computed here from the stored blocks:
// the float product of the dequantized blocks (activations: float, W8A16, the default) or the integer recipe
// (activations: int8, W8A8).
#include <cmath>

#include "core/gguf/gguf_file.h"
#include "kernels/fp16.h"
#include "plugin_test_support.h"
#include "tests/common/shared_data.h"

namespace troupe::testing {
namespace {

// y[t, o] = sum over blocks of int dot(w block, Q8_0(x) block) * d_w * d_x, from stored Q8_0 rows.
std::vector<float> q8_0_product(const block_q8_0* w, int64_t n_in, int64_t n_out, const std::vector<float>& x,
                                int64_t n_tokens) {
    std::vector<float> y(n_tokens * n_out);
    const int64_t nb = n_in / 32;
    for (int64_t t = 0; t < n_tokens; ++t) {
        std::vector<block_q8_0> xq(nb);
        for (int64_t b = 0; b < nb; ++b) {
            float amax = 0.0f;
            for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[t * n_in + b * 32 + i]));
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            xq[b].d = fp32_to_fp16(d);
            for (int i = 0; i < 32; ++i) xq[b].qs[i] = static_cast<int8_t>(std::round(x[t * n_in + b * 32 + i] * id));
        }
        for (int64_t o = 0; o < n_out; ++o) {
            double sum = 0.0;
            for (int64_t b = 0; b < nb; ++b) {
                const block_q8_0& wb = w[o * nb + b];
                int32_t isum = 0;
                for (int i = 0; i < 32; ++i) isum += int32_t{wb.qs[i]} * xq[b].qs[i];
                sum += static_cast<double>(isum) * fp16_to_fp32(wb.d) * fp16_to_fp32(xq[b].d);
            }
            y[t * n_out + o] = static_cast<float>(sum);
        }
    }
    return y;
}

// y[t, o] = sum_k (d_w * q_w)[k] * x[t, k] in double, from stored Q8_0 rows.
std::vector<float> float_product(const block_q8_0* w, int64_t n_in, int64_t n_out, const std::vector<float>& x,
                                 int64_t n_tokens) {
    std::vector<float> y(n_tokens * n_out);
    const int64_t nb = n_in / 32;
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t o = 0; o < n_out; ++o) {
            double sum = 0.0;
            for (int64_t k = 0; k < n_in; ++k) {
                const block_q8_0& wb = w[o * nb + k / 32];
                sum += double{fp16_to_fp32(wb.d) * wb.qs[k % 32]} * x[t * n_in + k];
            }
            y[t * n_out + o] = static_cast<float>(sum);
        }
    }
    return y;
}

std::vector<float> expected_product(bool int8, const block_q8_0* w, int64_t n_in, int64_t n_out,
                                    const std::vector<float>& x, int64_t n_tokens) {
    return int8 ? q8_0_product(w, n_in, n_out, x, n_tokens) : float_product(w, n_in, n_out, x, n_tokens);
}

class quant_plugin_real_weights : public ::testing::TestWithParam<bool> {};  // int8 activations?

TEST_P(quant_plugin_real_weights, stored_q8_0_tensors_of_stories260k_multiply_as_their_recipe) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K-Q8_0.gguf");
    auto file = gguf::gguf_file::open(path);
    ASSERT_TRUE(file.ok()) << file.message();
    plugin_host host = real_plugins();
    auto op = host.load_quant("q8", yaml(GetParam() ? "{activations: int8}" : "{}"));
    ASSERT_TRUE(op.ok()) << op.message();
    int n_checked = 0;
    for (const gguf::tensor_info& t : (*file)->tensors()) {
        if (t.type != ggml_type::q8_0 || t.dims.size() != 2) continue;
        const int64_t n_in = t.dims[0], n_out = t.dims[1], n_tokens = 3;
        auto w = (*op)->prepare(weight_view{t.type, t.data, n_in, n_out, row_bytes(t.type, n_in)});
        ASSERT_TRUE(w.ok()) << t.name << ": " << w.message();
        const std::vector<float> x = random_floats(n_in * n_tokens, 5, -2.0f, 2.0f);
        std::vector<float> y(n_out * n_tokens);
        const status st = (*op)->matmul(**w, x.data(), y.data(), n_tokens, threaded_parallel_for(4));
        ASSERT_TRUE(st.ok()) << t.name << ": " << st.message();
        const auto expected =
            expected_product(GetParam(), reinterpret_cast<const block_q8_0*>(t.data), n_in, n_out, x, n_tokens);
        for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_NEAR(y[i], expected[i], 1e-4f + 1e-5f * std::fabs(expected[i])) << t.name << " element " << i;
        }
        ++n_checked;
    }
    EXPECT_GE(n_checked, 20) << "expected the attention and FFN matrices of 5 layers to be Q8_0";
}

TEST_P(quant_plugin_real_weights, online_quantization_of_the_f32_model_multiplies_like_the_q8_0_file_made_from_it) {
    TROUPE_REQUIRE_SHARED(f32_path, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(q8_path, "models/stories260K-Q8_0.gguf");
    auto f32 = gguf::gguf_file::open(f32_path);
    auto q8 = gguf::gguf_file::open(q8_path);
    ASSERT_TRUE(f32.ok() && q8.ok());
    plugin_host host = real_plugins();
    auto op = host.load_quant("q8", yaml(GetParam() ? "{online: true, activations: int8}" : "{online: true}"));
    ASSERT_TRUE(op.ok()) << op.message();
    int n_checked = 0;
    for (const gguf::tensor_info& tq : (*q8)->tensors()) {
        if (tq.type != ggml_type::q8_0 || tq.dims.size() != 2) continue;
        const gguf::tensor_info* tf = (*f32)->find_tensor(tq.name);
        ASSERT_NE(tf, nullptr) << tq.name;
        ASSERT_EQ(tf->type, ggml_type::f32) << tq.name;
        const int64_t n_in = tq.dims[0], n_out = tq.dims[1], n_tokens = 2;
        auto w = (*op)->prepare(weight_view{ggml_type::f32, tf->data, n_in, n_out, static_cast<size_t>(n_in) * 4});
        ASSERT_TRUE(w.ok()) << tq.name << ": " << w.message();
        const std::vector<float> x = random_floats(n_in * n_tokens, 6, -2.0f, 2.0f);
        std::vector<float> y(n_out * n_tokens);
        ASSERT_TRUE((*op)->matmul(**w, x.data(), y.data(), n_tokens, no_parallel_for()).ok());
        const auto expected =
            expected_product(GetParam(), reinterpret_cast<const block_q8_0*>(tq.data), n_in, n_out, x, n_tokens);
        for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_NEAR(y[i], expected[i], 1e-4f + 1e-5f * std::fabs(expected[i])) << tq.name << " element " << i;
        }
        ++n_checked;
    }
    EXPECT_GE(n_checked, 20);
}

INSTANTIATE_TEST_SUITE_P(activations, quant_plugin_real_weights, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "int8" : "float"); });

}  // namespace
}  // namespace troupe::testing
