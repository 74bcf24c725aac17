// mla_params and mla_block: the MLA keys of the shared deepseek2 files; YaRN's rotation angles and attention scale
// against llama.cpp's formulas (ggml_rope_yarn_corr_dims, rope_yarn: written out here in ggml's own form); refusals
// of an unknown scaling type and of missing keys; and the block's host side (q with and without LoRA, the normed
// latent, RoPE on the decoupled dims) against a double-precision reference, through an attention op that records the
// MLA call it gets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <numbers>
#include <random>
#include <vector>

#include "core/gguf/gguf_writer.h"
#include "core/model/compute_context.h"
#include "core/model/mla_block.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

namespace fs = std::filesystem;

TEST(mla_params, are_read_from_the_deepseek2_files_with_and_without_q_lora) {
    TROUPE_REQUIRE_SHARED(v2, "models/arch/tiny-deepseek2.gguf");
    TROUPE_REQUIRE_SHARED(lite, "models/arch/tiny-deepseek2-lite.gguf");
    auto f = gguf::gguf_file::open(v2);
    ASSERT_TRUE(f.ok()) << f.message();
    auto p = read_mla_params(**f, "deepseek2");
    ASSERT_TRUE(p.ok()) << p.message();
    ASSERT_TRUE(p->has_value());
    const mla_params& a = **p;
    EXPECT_EQ(a.n_heads, 4);
    EXPECT_EQ(a.q_lora_rank, 48);
    EXPECT_EQ(a.kv_lora_rank, 64);
    EXPECT_EQ(a.qk_nope, 32);
    EXPECT_EQ(a.rope_dim, 16);
    EXPECT_EQ(a.v_dim, 32);
    EXPECT_FALSE(a.yarn.has_value()) << "rope.scaling.type none: the stored yarn_log_multiplier has no effect";
    EXPECT_FLOAT_EQ(a.attention_scale(), 1.0f / std::sqrt(48.0f));
    EXPECT_EQ(a.latent_elements_per_token(), 80);
    EXPECT_EQ(a.mha_elements_per_token(), 4 * (48 + 32));

    auto g = gguf::gguf_file::open(lite);
    ASSERT_TRUE(g.ok()) << g.message();
    auto q = read_mla_params(**g, "deepseek2");
    ASSERT_TRUE(q.ok()) << q.message();
    ASSERT_TRUE(q->has_value());
    EXPECT_EQ((*q)->q_lora_rank, 0);
    EXPECT_EQ((*q)->kv_lora_rank, 32);

    std::string errors;
    const mla_layer_weights w = bind_mla_layer(**g, **q, 26, 64, errors);
    EXPECT_EQ(errors, "");
    EXPECT_NE(w.wq.data, nullptr);
    EXPECT_EQ(w.wq_a.data, nullptr);
    EXPECT_EQ(w.wkv_a.n_out, 48);
    EXPECT_EQ(w.wkv_b.n_out, 4 * 64);
}

// A GGUF of deepseek2 MLA keys in a fresh folder, removed at the end.
class mla_keys : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("troupe_mla_keys_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir_);
        w_.set_string("general.architecture", "deepseek2");
        w_.set_u32("deepseek2.attention.head_count", 16);
        w_.set_u32("deepseek2.attention.kv_lora_rank", 512);
        w_.set_u32("deepseek2.attention.key_length", 192);
        w_.set_u32("deepseek2.attention.value_length", 128);
        w_.set_u32("deepseek2.rope.dimension_count", 64);
        w_.set_f32("deepseek2.rope.freq_base", 10000.0f);
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    result<std::optional<mla_params>> read() {
        const std::string path = (dir_ / "m.gguf").string();
        if (status st = w_.write(path); !st.ok()) return st.err();
        auto f = gguf::gguf_file::open(path);
        if (!f.ok()) return f.err();
        return read_mla_params(**f, "deepseek2");
    }
    fs::path dir_;
    gguf::gguf_writer w_;
};

// ggml's rope_yarn for dims i0 = 0, 2, ..., as llama.cpp computes it (ggml-cpu rope_yarn, ggml_rope_yarn_corr_dims).
float ggml_yarn_theta(float pos, int i0, int n_dims, float base, float freq_scale, int n_ctx_orig, float beta_fast,
                      float beta_slow) {
    const auto corr_dim = [&](float n_rot) {
        return n_dims * std::log(n_ctx_orig / (n_rot * 2 * std::numbers::pi_v<float>)) / (2 * std::log(base));
    };
    const float dims0 = std::max(0.0f, std::floor(corr_dim(beta_fast)));
    const float dims1 = std::min(static_cast<float>(n_dims - 1), std::ceil(corr_dim(beta_slow)));
    const float theta_extrap = pos * std::pow(std::pow(base, -2.0f / n_dims), static_cast<float>(i0 / 2));
    const float theta_interp = freq_scale * theta_extrap;
    const float y = (i0 / 2 - dims0) / std::max(0.001f, dims1 - dims0);
    const float ramp_mix = (1 - std::min(1.0f, std::max(0.0f, y))) * 1.0f;  // ext_factor 1
    return theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
}

TEST_F(mla_keys, yarn_angles_and_scale_follow_llama_cpp_for_deepseek_v2s_scaling) {
    // DeepSeek-V2's config: factor 40, original context 4096, mscale_all_dim 0.707 (stored as 0.0707), betas 32 / 1.
    w_.set_string("deepseek2.rope.scaling.type", "yarn");
    w_.set_f32("deepseek2.rope.scaling.factor", 40.0f);
    w_.set_u32("deepseek2.rope.scaling.original_context_length", 4096);
    w_.set_f32("deepseek2.rope.scaling.yarn_log_multiplier", 0.0707f);
    auto p = read();
    ASSERT_TRUE(p.ok()) << p.message();
    ASSERT_TRUE(p->has_value() && (*p)->yarn.has_value());
    const mla_params& m = **p;
    for (int32_t pos : {0, 1, 17, 4095, 100000}) {
        for (int32_t i = 0; i < 32; ++i) {
            const float want = ggml_yarn_theta(pos, 2 * i, 64, 10000.0f, 1.0f / 40.0f, 4096, 32.0f, 1.0f);
            EXPECT_NEAR(m.rope_angle(pos, i), want, 1e-6f + 1e-5f * std::fabs(want))
                << "position " << pos << " pair " << i;
        }
    }
    // The fastest pairs keep their angle (extrapolation), the slowest are interpolated by the factor.
    EXPECT_FLOAT_EQ(m.rope_angle(1000, 0), 1000.0f);
    EXPECT_NEAR(m.rope_angle(1000, 31), 1000.0f * std::pow(10000.0f, -62.0f / 64.0f) / 40.0f, 1e-6f);
    const float mscale = 1.0f + 0.0707f * std::log(40.0f);
    EXPECT_NEAR(m.attention_scale(), mscale * mscale / std::sqrt(192.0f), 1e-7f);
}

TEST_F(mla_keys, an_unknown_scaling_type_and_missing_keys_are_one_error_naming_each_key) {
    w_.set_string("deepseek2.rope.scaling.type", "longrope");
    w_.remove("deepseek2.attention.value_length");
    auto p = read();
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.message().find("bad MLA metadata"), std::string::npos) << p.message();
    EXPECT_NE(p.message().find("deepseek2.attention.value_length is missing"), std::string::npos) << p.message();
    EXPECT_NE(p.message().find("rope.scaling.type 'longrope' is not supported"), std::string::npos) << p.message();
}

TEST_F(mla_keys, yarn_without_its_original_context_is_refused) {
    w_.set_string("deepseek2.rope.scaling.type", "yarn");
    w_.set_f32("deepseek2.rope.scaling.factor", 4.0f);
    auto p = read();
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.message().find("rope.scaling.original_context_length is missing"), std::string::npos) << p.message();
}

// Records the MLA call it gets and writes a known output.
class recording_op final : public attention_op {
public:
    std::string name() const override { return "recorder"; }
    uint32_t features() const override { return attention_mla; }
    status forward(const attention_call& c, const parallel_for_fn&) override {
        call = c;
        q.assign(c.q, c.q + static_cast<size_t>(c.n_tokens) * c.n_heads * c.head_dim);
        k.assign(c.k, c.k + static_cast<size_t>(c.n_tokens) * (c.kv_lora_rank + c.rope_dim));
        for (size_t i = 0; i < static_cast<size_t>(c.n_tokens) * c.n_heads * c.v_head_dim; ++i) c.out[i] = 0.5f * i;
        return {};
    }
    attention_call call{};
    std::vector<float> q, k;
};

struct f32_matrix {
    std::vector<float> values;  // [n_out, n_in]
    weight_view view{};
};

f32_matrix random_matrix(int64_t n_in, int64_t n_out, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 0.3f);
    f32_matrix m;
    m.values.resize(static_cast<size_t>(n_in * n_out));
    for (float& v : m.values) v = normal(rng);
    m.view = weight_view{ggml_type::f32, m.values.data(), n_in, n_out, static_cast<size_t>(n_in) * sizeof(float)};
    return m;
}

// y[n_out] = W x (double)
std::vector<double> times(const f32_matrix& w, const std::vector<double>& x) {
    std::vector<double> y(static_cast<size_t>(w.view.n_out), 0.0);
    for (int64_t o = 0; o < w.view.n_out; ++o) {
        for (int64_t i = 0; i < w.view.n_in; ++i) y[o] += double{w.values[o * w.view.n_in + i]} * x[i];
    }
    return y;
}

void rmsnorm(double* x, int32_t n, const float* weight, float eps) {
    double ss = 0.0;
    for (int32_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const double r = 1.0 / std::sqrt(ss / n + eps);
    for (int32_t i = 0; i < n; ++i) x[i] *= r * weight[i];
}

void rope(double* x, int32_t rope_dim, int32_t pos, float base) {
    for (int32_t i = 0; i < rope_dim / 2; ++i) {
        const double theta = pos * std::pow(double{base}, -2.0 * i / rope_dim);
        const double x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * std::cos(theta) - x1 * std::sin(theta);
        x[2 * i + 1] = x0 * std::sin(theta) + x1 * std::cos(theta);
    }
}

class mla_block_host : public ::testing::TestWithParam<int32_t> {};  // q_lora_rank (0: none)

TEST_P(mla_block_host, computes_queries_and_the_normed_roped_latent_and_makes_an_mla_call) {
    mla_params p;
    p.n_heads = 3;
    p.q_lora_rank = GetParam();
    p.kv_lora_rank = 20;
    p.qk_nope = 6;
    p.rope_dim = 4;
    p.v_dim = 5;
    p.rope_base = 500.0f;
    const int32_t dim = 24, hd = p.head_dim(), lw = p.latent_width();
    std::mt19937 rng(5);
    f32_matrix wq = random_matrix(dim, p.q_width(), rng), wq_a = random_matrix(dim, std::max(1, p.q_lora_rank), rng),
               wq_b = random_matrix(std::max(1, p.q_lora_rank), p.q_width(), rng), wkv_a = random_matrix(dim, lw, rng);
    std::vector<float> q_a_norm(std::max(1, p.q_lora_rank)), kv_a_norm(p.kv_lora_rank);
    for (size_t i = 0; i < q_a_norm.size(); ++i) q_a_norm[i] = 0.5f + 0.1f * i;
    for (size_t i = 0; i < kv_a_norm.size(); ++i) kv_a_norm[i] = 1.5f - 0.05f * i;
    mla_layer_weights w{};
    if (p.q_lora_rank > 0) {
        w.wq_a = wq_a.view;
        w.wq_b = wq_b.view;
        w.q_a_norm = weight_view{ggml_type::f32, q_a_norm.data(), p.q_lora_rank, 1, 0};
    } else {
        w.wq = wq.view;
    }
    w.wkv_a = wkv_a.view;
    w.kv_a_norm = weight_view{ggml_type::f32, kv_a_norm.data(), p.kv_lora_rank, 1, 0};
    const make_linear_fn make = [](const weight_view& v, const std::string& name, linear& out) -> status {
        auto l = linear::make(v, nullptr, name, cpu::activation_recipe::float32);
        if (!l.ok()) return l.err();
        out = std::move(*l);
        return {};
    };
    auto ws = std::make_shared<mla_workspace>();
    auto block = mla_block::make(p, w, 7, "blk.7.", make, ws);
    ASSERT_TRUE(block.ok()) << block.message();

    const size_t n = 3;
    const std::vector<int32_t> positions = {0, 5, 9};
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(n * dim);
    for (float& v : x) v = normal(rng);
    std::vector<float> out(n * p.out_width(), -1.0f);
    cpu::thread_pool pool(2);
    const compute_context ctx = compute_context::over(pool);
    recording_op op;
    attention_call step{};
    step.positions = positions.data();
    ws->begin_step(p, positions.data(), n);
    ASSERT_TRUE(block->forward(x.data(), n, step, op, ctx, out.data()).ok());

    EXPECT_EQ(op.call.n_tokens, 3);
    EXPECT_EQ(op.call.n_heads, 3);
    EXPECT_EQ(op.call.n_kv_heads, 1);
    EXPECT_EQ(op.call.head_dim, hd);
    EXPECT_EQ(op.call.layer, 7);
    EXPECT_EQ(op.call.kv_lora_rank, 20);
    EXPECT_EQ(op.call.rope_dim, 4);
    EXPECT_EQ(op.call.v_head_dim, 5);
    EXPECT_EQ(op.call.v, nullptr);
    EXPECT_EQ(op.call.positions, positions.data()) << "the step's fields pass through";
    EXPECT_FLOAT_EQ(op.call.scale, 1.0f / std::sqrt(10.0f));
    EXPECT_EQ(out[4], 2.0f) << "the op's output is the block's";
    for (size_t t = 0; t < n; ++t) {
        const std::vector<double> xt(x.begin() + t * dim, x.begin() + (t + 1) * dim);
        std::vector<double> q;
        if (p.q_lora_rank > 0) {
            std::vector<double> a = times(wq_a, xt);
            rmsnorm(a.data(), p.q_lora_rank, q_a_norm.data(), p.rms_eps);
            q = times(wq_b, a);
        } else {
            q = times(wq, xt);
        }
        std::vector<double> kv = times(wkv_a, xt);
        rmsnorm(kv.data(), p.kv_lora_rank, kv_a_norm.data(), p.rms_eps);
        rope(kv.data() + p.kv_lora_rank, p.rope_dim, positions[t], p.rope_base);
        for (int32_t h = 0; h < p.n_heads; ++h)
            rope(q.data() + h * hd + p.qk_nope, p.rope_dim, positions[t], p.rope_base);
        for (int32_t i = 0; i < p.q_width(); ++i)
            EXPECT_NEAR(op.q[t * p.q_width() + i], q[i], 1e-4 + 1e-4 * std::fabs(q[i])) << "token " << t << " q " << i;
        for (int32_t i = 0; i < lw; ++i)
            EXPECT_NEAR(op.k[t * lw + i], kv[i], 1e-4 + 1e-4 * std::fabs(kv[i])) << "token " << t << " latent " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(mla, mla_block_host, ::testing::Values(0, 8),
                         [](const ::testing::TestParamInfo<int32_t>& info) {
                             return info.param > 0 ? std::string("with_q_lora") : std::string("without_q_lora");
                         });

TEST(mla_kv_layout, holds_one_latent_row_per_token_and_no_values) {
    mla_params p;
    p.n_heads = 16;
    p.kv_lora_rank = 512;
    p.qk_nope = 128;
    p.rope_dim = 64;
    p.v_dim = 128;
    EXPECT_EQ(mla_kv_layout(p, kv_dtype::f32).bytes_per_token, 576u * 4);
    EXPECT_EQ(mla_kv_layout(p, kv_dtype::f16).bytes_per_token, 576u * 2);
    EXPECT_EQ(p.mha_elements_per_token(), 16 * (192 + 128));
    EXPECT_EQ(p.gqa_elements_per_token(8), 8 * (192 + 128));
}

}  // namespace
}  // namespace troupe
