// moe_ffn against a scalar reference written out in plain loops (float weights as the stored type dequantizes them,
// float activations): softmax and sigmoid gating, renormalised and scaled weights, a selection bias, shared experts,
// decode (one token) and steps of many tokens routed unevenly (some experts get many tokens, some none), F32, F16,
// Q8_0 and Q4_K experts in both activation recipes. A quant op that records its products shows that quant plugins
// take the experts and that a decode step multiplies only the router, the selected experts and the shared ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/model/compute_context.h"
#include "core/model/moe_ffn.h"
#include "kernels/ref/quants.h"

namespace troupe {
namespace {

// A matrix of n_out rows of n_in random values stored as `type`, and the float values it holds.
struct stored_matrix {
    std::vector<uint8_t> bytes;
    std::vector<float> values;  // [n_out, n_in] dequantized
    weight_view view{};
};

stored_matrix random_matrix(ggml_type type, int64_t n_in, int64_t n_out, float std_dev, std::mt19937& rng,
                            const std::vector<float>& row_scale = {}) {
    std::normal_distribution<float> normal(0.0f, std_dev);
    stored_matrix m;
    const size_t rb = row_bytes(type, n_in);
    m.bytes.resize(rb * n_out);
    m.values.resize(n_in * n_out);
    std::vector<float> row(n_in);
    for (int64_t r = 0; r < n_out; ++r) {
        const float s = row_scale.empty() ? 1.0f : row_scale[r];
        for (float& v : row) v = s * normal(rng);
        ref::quantize_row(type, row.data(), m.bytes.data() + r * rb, n_in);
        ref::dequantize_row(type, m.bytes.data() + r * rb, m.values.data() + r * n_in, n_in);
    }
    m.view = weight_view{type, m.bytes.data(), n_in, n_out, rb};
    return m;
}

struct moe_case {
    const char* name;
    moe_gating gating;
    bool norm;
    float scale;
    int32_t n_shared;
    bool bias;
    ggml_type expert_type;
    cpu::activation_recipe recipe;
    size_t n_tokens;
    float tolerance;  // relative to the output's largest magnitude
};

constexpr int32_t k_dim = 256, k_ffn = 256, k_experts = 8, k_used = 2;

// One layer's weights and the reference's float copies.
struct moe_fixture {
    moe_params p;
    stored_matrix router, gate, up, down, gate_sh, up_sh, down_sh;
    std::vector<float> bias;
    moe_layer_weights w{};

    explicit moe_fixture(const moe_case& c) {
        p.n_experts = k_experts;
        p.n_used = k_used;
        p.n_shared = c.n_shared;
        p.expert_ffn = k_ffn;
        p.gating = c.gating;
        p.norm_weights = c.norm;
        p.weights_scale = c.scale;
        std::mt19937 rng(11);
        // Router rows of different sizes: the experts with larger rows win more often, so routing is uneven.
        std::vector<float> row_scale(k_experts);
        for (int32_t e = 0; e < k_experts; ++e) row_scale[e] = 0.3f + 0.25f * e;
        router = random_matrix(ggml_type::f32, k_dim, k_experts, 0.1f, rng, row_scale);
        gate = random_matrix(c.expert_type, k_dim, k_experts * k_ffn, 0.1f, rng);
        up = random_matrix(c.expert_type, k_dim, k_experts * k_ffn, 0.1f, rng);
        down = random_matrix(c.expert_type, k_ffn, k_experts * k_dim, 0.1f, rng);
        w.router = router.view;
        w.gate_exps = gate.view;
        w.up_exps = up.view;
        w.down_exps = down.view;
        w.probs_bias = nullptr;
        if (c.bias) {
            bias.resize(k_experts);
            for (int32_t e = 0; e < k_experts; ++e) bias[e] = 0.05f * static_cast<float>((e * 5) % k_experts);
            w.probs_bias = bias.data();
        }
        if (c.n_shared > 0) {
            const int64_t s = p.shared_ffn();
            gate_sh = random_matrix(c.expert_type, k_dim, s, 0.1f, rng);
            up_sh = random_matrix(c.expert_type, k_dim, s, 0.1f, rng);
            down_sh = random_matrix(c.expert_type, s, k_dim, 0.1f, rng);
            w.gate_shexp = gate_sh.view;
            w.up_shexp = up_sh.view;
            w.down_shexp = down_sh.view;
        }
    }
};

// y = x · Wᵀ over rows [r0, r0 + n_out) of a float matrix.
std::vector<float> matvec(const std::vector<float>& w, int64_t r0, int64_t n_out, int64_t n_in, const float* x) {
    std::vector<float> y(n_out);
    for (int64_t o = 0; o < n_out; ++o) {
        double s = 0.0;
        for (int64_t i = 0; i < n_in; ++i) s += static_cast<double>(w[(r0 + o) * n_in + i]) * x[i];
        y[o] = static_cast<float>(s);
    }
    return y;
}

// SwiGLU FFN of rows [r0, r0 + f) of gate/up and rows [d0, d0 + dim) of down.
std::vector<float> swiglu_ffn(const moe_fixture& m, const stored_matrix& gate, const stored_matrix& up,
                              const stored_matrix& down, int64_t f, int64_t r0, int64_t d0, const float* x) {
    const std::vector<float> g = matvec(gate.values, r0, f, k_dim, x);
    const std::vector<float> u = matvec(up.values, r0, f, k_dim, x);
    std::vector<float> h(f);
    for (int64_t i = 0; i < f; ++i) h[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    (void)m;
    return matvec(down.values, d0, k_dim, f, h.data());
}

// The reference: plain loops, token by token.
std::vector<float> reference_moe(const moe_fixture& m, const std::vector<float>& x, size_t n,
                                 std::vector<int32_t>& chosen_out) {
    std::vector<float> y(n * k_dim, 0.0f);
    chosen_out.clear();
    for (size_t t = 0; t < n; ++t) {
        const float* xt = x.data() + t * k_dim;
        const std::vector<float> logits = matvec(m.router.values, 0, k_experts, k_dim, xt);
        std::vector<float> probs(k_experts);
        if (m.p.gating == moe_gating::softmax) {
            double sum = 0.0;
            const float mx = *std::max_element(logits.begin(), logits.end());
            for (int32_t e = 0; e < k_experts; ++e) sum += std::exp(static_cast<double>(logits[e] - mx));
            for (int32_t e = 0; e < k_experts; ++e) probs[e] = static_cast<float>(std::exp(logits[e] - mx) / sum);
        } else {
            for (int32_t e = 0; e < k_experts; ++e) probs[e] = 1.0f / (1.0f + std::exp(-logits[e]));
        }
        std::vector<int32_t> order(k_experts);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
            const float sa = probs[a] + (m.bias.empty() ? 0.0f : m.bias[a]);
            const float sb = probs[b] + (m.bias.empty() ? 0.0f : m.bias[b]);
            return sa > sb;
        });
        float sum = 0.0f;
        for (int32_t s = 0; s < k_used; ++s) sum += probs[order[s]];
        for (int32_t s = 0; s < k_used; ++s) {
            const int32_t e = order[s];
            chosen_out.push_back(e);
            float w = probs[e];
            if (m.p.norm_weights) w /= sum;
            w *= m.p.weights_scale;
            const std::vector<float> ye =
                swiglu_ffn(m, m.gate, m.up, m.down, k_ffn, int64_t{e} * k_ffn, int64_t{e} * k_dim, xt);
            for (int32_t i = 0; i < k_dim; ++i) y[t * k_dim + i] += w * ye[i];
        }
        if (m.p.n_shared > 0) {
            const std::vector<float> ys = swiglu_ffn(m, m.gate_sh, m.up_sh, m.down_sh, m.p.shared_ffn(), 0, 0, xt);
            for (int32_t i = 0; i < k_dim; ++i) y[t * k_dim + i] += ys[i];
        }
    }
    return y;
}

std::vector<float> random_tokens(size_t n) {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(n * k_dim);
    for (float& v : x) v = normal(rng);
    return x;
}

class moe_vs_reference : public ::testing::TestWithParam<moe_case> {};

TEST_P(moe_vs_reference, the_layer_output_equals_the_scalar_reference) {
    const moe_case& c = GetParam();
    moe_fixture fx(c);
    auto make = [&](const weight_view& w, const std::string& name, linear& out) -> status {
        auto l = linear::make(w, nullptr, name, c.recipe);
        if (!l.ok()) return l.err();
        out = std::move(*l);
        return {};
    };
    auto moe = moe_ffn::make(fx.p, fx.w, k_dim, "blk.1.", make, nullptr);
    ASSERT_TRUE(moe.ok()) << moe.message();
    cpu::thread_pool pool(2);
    const compute_context ctx = compute_context::over(pool);

    const std::vector<float> x = random_tokens(c.n_tokens);
    std::vector<float> y(c.n_tokens * k_dim, std::nanf(""));
    ASSERT_TRUE(moe->forward(x.data(), y.data(), c.n_tokens, ctx).ok());
    std::vector<int32_t> chosen;
    const std::vector<float> expected = reference_moe(fx, x, c.n_tokens, chosen);
    ASSERT_EQ(moe->last_experts(), chosen) << "routing differs from the reference";

    float largest = 0.0f;
    for (float v : expected) largest = std::max(largest, std::fabs(v));
    ASSERT_GT(largest, 0.0f);
    float worst = 0.0f;
    for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << "output " << i;
        worst = std::max(worst, std::fabs(y[i] - expected[i]));
    }
    EXPECT_LE(worst, c.tolerance * largest) << "largest |y| " << largest;

    if (c.n_tokens > 1) {  // the case routes unevenly, as real batches do
        std::vector<int> count(k_experts, 0);
        for (int32_t e : chosen) ++count[e];
        const auto [lo, hi] = std::minmax_element(count.begin(), count.end());
        EXPECT_GE(*hi, 2 * std::max(1, *lo)) << "routing came out even; the case should test uneven groups";
    }
}

constexpr auto f32 = cpu::activation_recipe::float32;
constexpr auto q8 = cpu::activation_recipe::quantized;

INSTANTIATE_TEST_SUITE_P(
    cases, moe_vs_reference,
    ::testing::Values(
        moe_case{"mixtral_decode_f32", moe_gating::softmax, true, 1.0f, 0, false, ggml_type::f32, f32, 1, 1e-4f},
        moe_case{"mixtral_37_tokens_f16", moe_gating::softmax, true, 1.0f, 0, false, ggml_type::f16, f32, 37, 1e-4f},
        moe_case{"deepseek2_shared_no_norm", moe_gating::softmax, false, 1.0f, 1, false, ggml_type::f16, f32, 37,
                 1e-4f},
        moe_case{"sigmoid_norm_scaled_bias", moe_gating::sigmoid, true, 2.5f, 2, true, ggml_type::f32, f32, 23, 1e-4f},
        moe_case{"sigmoid_no_norm_decode", moe_gating::sigmoid, false, 1.0f, 1, false, ggml_type::f32, q8, 1, 1e-4f},
        // Many tokens: experts with more than k_max_fused_tokens rows run gate and up apart (prefill's GEMMs).
        moe_case{"softmax_100_tokens_q8_0", moe_gating::softmax, false, 1.0f, 1, false, ggml_type::q8_0, f32, 100,
                 1e-4f},
        moe_case{"q8_0_quantized_activations", moe_gating::softmax, true, 1.0f, 1, false, ggml_type::q8_0, q8, 41,
                 3e-2f},
        moe_case{"q4_k_decode_quantized", moe_gating::softmax, true, 1.0f, 0, false, ggml_type::q4_k, q8, 1, 3e-2f},
        moe_case{"q4_k_70_tokens_float", moe_gating::softmax, false, 1.5f, 1, false, ggml_type::q4_k, f32, 70, 1e-4f},
        moe_case{"q4_k_70_tokens_quantized", moe_gating::softmax, false, 1.0f, 1, false, ggml_type::q4_k, q8, 70,
                 3e-2f}),
    [](const ::testing::TestParamInfo<moe_case>& info) { return std::string(info.param.name); });

// A quant op that claims F32 weights, multiplies them in float and records which weights it multiplied.
class recording_op final : public quant_op {
public:
    struct weight final : prepared_weight {
        weight_view view;
        size_t n_bytes() const override { return view.row_stride * view.n_out; }
    };
    std::string name() const override { return "test/recording"; }
    bool claims(ggml_type type) const override { return type == ggml_type::f32; }
    result<std::shared_ptr<const prepared_weight>> prepare(const weight_view& w) override {
        auto p = std::make_shared<weight>();
        p->view = w;
        return std::shared_ptr<const prepared_weight>(p);
    }
    status matmul(const prepared_weight& pw, const float* x, float* y, int64_t n, const parallel_for_fn&) override {
        const weight_view& w = static_cast<const weight&>(pw).view;
        multiplied.insert(w.data);
        for (int64_t t = 0; t < n; ++t) {
            for (int64_t o = 0; o < w.n_out; ++o) {
                const float* row =
                    reinterpret_cast<const float*>(static_cast<const uint8_t*>(w.data) + o * w.row_stride);
                float s = 0.0f;
                for (int64_t i = 0; i < w.n_in; ++i) s += row[i] * x[t * w.n_in + i];
                y[t * w.n_out + o] = s;
            }
        }
        return {};
    }
    std::set<const void*> multiplied;  // the weights' first rows
};

TEST(moe_ffn, a_decode_step_multiplies_only_the_router_the_selected_experts_and_the_shared_ones) {
    const moe_case c{"", moe_gating::softmax, false, 1.0f, 1, false, ggml_type::f32, f32, 1, 1e-4f};
    moe_fixture fx(c);
    recording_op op;
    auto make = [&](const weight_view& w, const std::string& name, linear& out) -> status {
        auto l = linear::make(w, &op, name);
        if (!l.ok()) return l.err();
        out = std::move(*l);
        return {};
    };
    auto moe = moe_ffn::make(fx.p, fx.w, k_dim, "blk.1.", make, nullptr);
    ASSERT_TRUE(moe.ok()) << moe.message();
    cpu::thread_pool pool(2);
    const compute_context ctx = compute_context::over(pool);
    const std::vector<float> x = random_tokens(1);
    std::vector<float> y(k_dim);
    ASSERT_TRUE(moe->forward(x.data(), y.data(), 1, ctx).ok());

    std::set<const void*> expected{fx.router.view.data, fx.gate_sh.view.data, fx.up_sh.view.data, fx.down_sh.view.data};
    for (const int32_t e : moe->last_experts()) {
        for (const stored_matrix* m : {&fx.gate, &fx.up, &fx.down})
            expected.insert(expert_matrix(m->view, k_experts, e).data);
    }
    EXPECT_EQ(op.multiplied, expected);
    std::vector<int32_t> chosen;
    const std::vector<float> ref = reference_moe(fx, x, 1, chosen);
    for (int32_t i = 0; i < k_dim; ++i) EXPECT_NEAR(y[i], ref[i], 1e-4f) << i;

    // The bandwidth bound counts those bytes only: the router, k of the 8 experts, the shared expert.
    const size_t expert_bytes = 3 * size_t{k_ffn} * k_dim * sizeof(float);
    const size_t shared_bytes = 3 * size_t{k_ffn} * k_dim * sizeof(float);
    EXPECT_EQ(moe->active_bytes_per_token(), k_experts * k_dim * sizeof(float) + k_used * expert_bytes + shared_bytes);
}

TEST(moe_router, expert_groups_list_each_experts_tokens_in_token_order) {
    // 4 tokens, top 2 of 3 experts.
    const int32_t experts[] = {2, 0, 0, 1, 2, 1, 0, 2};
    expert_groups g;
    g.build(experts, 4, 2, 3);
    EXPECT_EQ(g.offsets, (std::vector<int32_t>{0, 3, 5, 8}));
    EXPECT_EQ(g.token_of, (std::vector<int32_t>{0, 1, 3, 1, 2, 0, 2, 3}));
    for (size_t i = 0; i < 8; ++i) {
        const int32_t r = g.row_of[i];
        EXPECT_EQ(g.token_of[r], static_cast<int32_t>(i / 2));
        EXPECT_GE(r, g.offsets[experts[i]]);
        EXPECT_LT(r, g.offsets[experts[i] + 1]);
    }
}

}  // namespace
}  // namespace troupe
