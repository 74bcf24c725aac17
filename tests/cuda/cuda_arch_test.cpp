// The architecture families on the CUDA runner: qwen2 (q/k/v biases, tied output), phi3 (fused qkv and gate/up
// as row views), gemma2 (GeGLU, post norms, scaled embeddings, attention and final soft-capping, a window of 4 on the
// even layers), mixtral (experts) and deepseek2 (latent attention, experts with a shared one) reach the backend with
// their features (host side: runs everywhere), and on a GPU
// give ../shared/golden/arch-greedy.json's 48 ids with first-step logits within 0.02 of it
// and of the CPU graph (skips without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include "core/backend/cuda_runner.h"
#include "core/backend/cuda_upload.h"
#include "core/backend/llama_view_of.h"
#include "core/model/cpu_llama.h"
#include "core/model/greedy.h"
#include "kernels/cuda/cuda_scratch_layout.h"
#include "kernels/ref/attention.h"
#include "tests/common/shared_data.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/golden/golden_runs.h"

namespace troupe {
namespace {

constexpr float kLogitTolerance = 0.02f;  // first-step logits against the golden and against the CPU graph

const uint8_t* bytes_of(const void* p) {
    return static_cast<const uint8_t*>(p);
}

// The upload of one arch file, with the weights it views kept alive.
struct arch_upload {
    llama_weights weights;
    std::unique_ptr<cuda_upload> up;
};

result<arch_upload> upload_of(const std::string& path) {
    auto w = testing::load_llama_weights(path);
    if (!w.ok()) return w.err();
    arch_upload a{std::move(w.value()), nullptr};
    auto up = prepare_cuda_upload(llama_view_of(a.weights), cuda_runner_params{});
    if (!up.ok()) return up.err();
    a.up = std::move(up.value());
    return a;
}

TEST(cuda_arch_upload, qwen2_sends_its_biases_and_one_tied_output_matrix) {
    TROUPE_REQUIRE_SHARED(path, "models/arch/tiny-qwen2.gguf");
    auto a = upload_of(path);
    ASSERT_TRUE(a.ok()) << a.message();
    const troupe_cuda_model_desc& d = a->up->desc;
    EXPECT_EQ(d.struct_size, sizeof d);
    ASSERT_NE(d.layer_features, nullptr);
    for (int32_t il = 0; il < d.n_layers; ++il) {
        const troupe_cuda_layer_features& f = d.layer_features[il];
        EXPECT_EQ(f.bq.data, a->weights.layers[il].bq.data) << il;
        EXPECT_EQ(f.bk.data, a->weights.layers[il].bk.data) << il;
        EXPECT_EQ(f.bv.data, a->weights.layers[il].bv.data) << il;
        EXPECT_EQ(f.bq.n_in, 128);  // 4 heads of 32
        EXPECT_EQ(f.bk.n_in, 64);   // 2 KV heads of 32
        EXPECT_EQ(f.bq.type, TROUPE_CUDA_F32);
        EXPECT_EQ(f.post_attn_norm.data, nullptr);
        EXPECT_EQ(f.window, 0);
    }
    EXPECT_EQ(d.output.data, d.token_embd.data);  // no output.weight: the embedding matrix, uploaded once
    EXPECT_EQ(d.rope_neox, 1);
    EXPECT_EQ(d.ffn_activation, TROUPE_CUDA_ACT_SILU);
    EXPECT_EQ(d.attn_softcap, 0.0f);
}

// tiny-phi3's sliding_window of 2048 is not below its context, so it changes nothing (llama_hparams reads it as none)
// and phi3 needs no feature of revision 4: its fused matrices arrive as row views.
TEST(cuda_arch_upload, phi3_sends_row_views_of_its_fused_matrices) {
    TROUPE_REQUIRE_SHARED(path, "models/arch/tiny-phi3.gguf");
    auto a = upload_of(path);
    ASSERT_TRUE(a.ok()) << a.message();
    const troupe_cuda_model_desc& d = a->up->desc;
    for (int32_t il = 0; il < d.n_layers; ++il) {
        const troupe_cuda_layer& l = d.layers[il];
        // attn_qkv: rows 0..127 q, 128..255 k, 256..383 v; ffn_up: 256 gate rows, then 256 up rows.
        EXPECT_EQ(bytes_of(l.wk.data), bytes_of(l.wq.data) + 128 * l.wq.row_stride) << il;
        EXPECT_EQ(bytes_of(l.wv.data), bytes_of(l.wq.data) + 256 * l.wq.row_stride) << il;
        EXPECT_EQ(bytes_of(l.w_up.data), bytes_of(l.w_gate.data) + 256 * l.w_gate.row_stride) << il;
    }
    EXPECT_EQ(a->weights.hp.sliding_window, 0);
    EXPECT_EQ(d.layer_features, nullptr);
    EXPECT_EQ(d.rope_neox, 1);
    EXPECT_NE(d.output.data, d.token_embd.data);
}

TEST(cuda_arch_upload, gemma2_sends_geglu_post_norms_scales_soft_caps_and_windows_on_even_layers) {
    TROUPE_REQUIRE_SHARED(path, "models/arch/tiny-gemma2.gguf");
    auto a = upload_of(path);
    ASSERT_TRUE(a.ok()) << a.message();
    const troupe_cuda_model_desc& d = a->up->desc;
    EXPECT_EQ(d.ffn_activation, TROUPE_CUDA_ACT_GELU_TANH);
    EXPECT_FLOAT_EQ(d.embed_scale, std::sqrt(128.0f));
    EXPECT_EQ(d.attn_softcap, 50.0f);
    EXPECT_EQ(d.final_softcap, 30.0f);
    EXPECT_EQ(d.output.data, d.token_embd.data);
    ASSERT_NE(d.layer_features, nullptr);
    ASSERT_EQ(d.n_layers, 26);
    for (int32_t il = 0; il < d.n_layers; ++il) {
        const troupe_cuda_layer_features& f = d.layer_features[il];
        EXPECT_EQ(f.window, il % 2 == 0 ? 4 : 0) << il;
        EXPECT_EQ(f.post_attn_norm.data, a->weights.layers[il].post_attn_norm.data) << il;
        EXPECT_EQ(f.post_ffn_norm.data, a->weights.layers[il].post_ffn_norm.data) << il;
        EXPECT_NE(f.post_ffn_norm.data, nullptr) << il;
    }
}

TEST(cuda_arch_upload, a_llama_model_sends_no_features_so_an_older_backend_still_takes_it) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto a = upload_of(path);
    ASSERT_TRUE(a.ok()) << a.message();
    EXPECT_FALSE(needs_arch_features(llama_view_of(a->weights)));
    EXPECT_EQ(a->up->desc.layer_features, nullptr);
    EXPECT_EQ(a->up->desc.ffn_activation, TROUPE_CUDA_ACT_SILU);
}

// tiny-mixtral (4 experts of 256 units, top 2 renormalised, softmax): each layer's router and stacked experts reach
// the backend as the backend's own F16 matrices, no dense FFN, and the routing rule's parameters.
TEST(cuda_arch_upload, mixtral_sends_its_router_and_stacked_experts_instead_of_a_dense_ffn) {
    TROUPE_REQUIRE_SHARED(path, "models/arch/tiny-mixtral.gguf");
    auto a = upload_of(path);
    ASSERT_TRUE(a.ok()) << a.message();
    const troupe_cuda_model_desc& d = a->up->desc;
    ASSERT_NE(d.moe_layers, nullptr);
    EXPECT_EQ(d.moe_n_experts, 4);
    EXPECT_EQ(d.moe_n_used, 2);
    EXPECT_EQ(d.moe_expert_ffn, 256);
    EXPECT_EQ(d.moe_shared_ffn, 0);
    EXPECT_EQ(d.moe_gating, 1);
    EXPECT_EQ(d.moe_norm_weights, 1);
    EXPECT_EQ(d.moe_weights_scale, 1.0f);
    for (int32_t il = 0; il < d.n_layers; ++il) {
        const troupe_cuda_moe_layer& m = d.moe_layers[il];
        const moe_layer_weights& w = a->weights.layers[il].moe;
        EXPECT_EQ(m.router.data, w.router.data) << il;
        EXPECT_EQ(m.router.n_out, 4);
        EXPECT_EQ(m.gate_exps.data, w.gate_exps.data) << il;
        EXPECT_EQ(m.gate_exps.n_out, 4 * 256);
        EXPECT_EQ(m.down_exps.n_out, 4 * 128);
        EXPECT_EQ(m.down_exps.n_in, 256);
        EXPECT_EQ(m.gate_exps.type, TROUPE_CUDA_F16);
        EXPECT_EQ(m.probs_bias.data, nullptr);
        EXPECT_EQ(m.gate_shexp.data, nullptr);
        EXPECT_EQ(d.layers[il].w_gate.data, nullptr) << "a MoE layer sends no dense FFN";
    }
    // A token's decode step skips 2 of the 4 experts: half of each layer's 3 stacked F16 matrices of 4 x 256 x 128.
    EXPECT_EQ(unrouted_expert_bytes(d), uint64_t{2} * 3 * (4 * 256 * 128 * 2) / 2);
    EXPECT_EQ(unrouted_expert_bytes(upload_of(std::string(path).replace(path.find("mixtral"), 7, "qwen2"))->up->desc),
              0u);
}

// tiny-deepseek2 (latent attention with a query LoRA, experts with a shared one after a leading dense layer) and
// tiny-deepseek2-lite (no query LoRA): every layer sends its MLA block (the file's own matrices, attn_kv_b as the
// backend's rows) in place of wq, wk, wv, wo of [dim, H v_dim], and the RoPE tables that reproduce the CPU's angles.
TEST(cuda_arch_upload, deepseek2_sends_its_latent_attention_blocks_and_rope_tables) {
    for (const char* name : {"tiny-deepseek2.gguf", "tiny-deepseek2-lite.gguf"}) {
        TROUPE_REQUIRE_SHARED(path, std::string("models/arch/") + name);
        auto a = upload_of(path);
        ASSERT_TRUE(a.ok()) << a.message();
        const troupe_cuda_model_desc& d = a->up->desc;
        const mla_params& p = *a->weights.hp.mla;
        ASSERT_NE(d.mla_layers, nullptr) << name;
        EXPECT_EQ(d.mla_kv_lora_rank, p.kv_lora_rank);
        EXPECT_EQ(d.mla_q_lora_rank, p.q_lora_rank);
        EXPECT_EQ(d.mla_qk_nope, p.qk_nope);
        EXPECT_EQ(d.mla_rope_dim, p.rope_dim);
        EXPECT_EQ(d.mla_v_dim, p.v_dim);
        EXPECT_FLOAT_EQ(d.attn_scale, p.attention_scale());
        for (int32_t il = 0; il < d.n_layers; ++il) {
            const troupe_cuda_mla_layer& m = d.mla_layers[il];
            const mla_layer_weights& w = a->weights.layers[il].mla;
            EXPECT_EQ(d.layers[il].wq.data, nullptr) << name << " layer " << il << ": no standard q, k, v";
            EXPECT_EQ(d.layers[il].wk.data, nullptr);
            EXPECT_EQ(d.layers[il].wo.n_in, int64_t{p.n_heads} * p.v_dim);
            EXPECT_EQ(m.wkv_a.data, w.wkv_a.data);
            EXPECT_EQ(m.wkv_a.n_out, p.kv_lora_rank + p.rope_dim);
            EXPECT_EQ(m.wkv_b.n_out, int64_t{p.n_heads} * (p.qk_nope + p.v_dim));
            EXPECT_EQ(m.wkv_b.n_in, p.kv_lora_rank);
            EXPECT_NE(m.kv_a_norm.data, nullptr);
            if (p.q_lora_rank > 0) {
                EXPECT_EQ(m.wq.data, nullptr);
                EXPECT_EQ(m.wq_a.data, w.wq_a.data);
                EXPECT_EQ(m.wq_b.n_in, p.q_lora_rank);
                EXPECT_NE(m.q_a_norm.data, nullptr);
            } else {
                EXPECT_EQ(m.wq.data, w.wq.data);
                EXPECT_EQ(m.wq_a.data, nullptr);
            }
        }
        // The device turns pair i at position pos by pos * freq[i], blended by ramp[i] under YaRN, as the CPU does.
        for (int32_t i = 0; i < p.rope_dim / 2; ++i) {
            for (int32_t pos : {0, 1, 7, 300, 4095}) {
                float theta = static_cast<float>(pos) * d.mla_rope_freq[i];
                if (d.mla_yarn_factor != 1.0f) {
                    theta = theta / d.mla_yarn_factor * (1.0f - d.mla_rope_ramp[i]) + theta * d.mla_rope_ramp[i];
                }
                EXPECT_EQ(theta, p.rope_angle(pos, i)) << name << " pair " << i << " position " << pos;
            }
        }
        // Its step scratch (as the device model keeps the description: counts, no pointers) holds every latent buffer.
        troupe_cuda_model_desc kept = d;
        kept.mla_layers = nullptr;
        const int32_t t = 19;
        const cuda::scratch_layout l = cuda::layout_for(kept, t);
        const size_t f = sizeof(float), latent = p.kv_lora_rank + p.rope_dim;
        EXPECT_EQ(l.mla_qa.bytes, t * static_cast<size_t>(p.q_lora_rank) * f);
        EXPECT_EQ(l.mla_kv.bytes, t * latent * f);
        EXPECT_EQ(l.mla_q.bytes, t * p.n_heads * latent * f);
        EXPECT_EQ(l.mla_o.bytes, t * static_cast<size_t>(p.n_heads) * p.kv_lora_rank * f);
        EXPECT_GE(l.q.bytes, t * static_cast<size_t>(p.n_heads) * p.head_dim() * f);
        EXPECT_GE(l.att.bytes, t * static_cast<size_t>(p.n_heads) * p.v_dim * f);
        EXPECT_EQ(l.total, l.mla_o.offset + ((l.mla_o.bytes + 255) & ~size_t{255}));
    }
}

// The step's scratch for tiny-mixtral as the device model sees its description (model_create keeps the expert counts
// and clears the moe_layers pointer): every expert buffer has its rows, no two regions overlap, all lie inside the
// buffer; a dense model's expert regions are empty. (The first GPU run read the pointer and gave them no room.)
TEST(cuda_arch_upload, the_steps_scratch_gives_every_expert_buffer_its_rows_without_overlap) {
    TROUPE_REQUIRE_SHARED(path, "models/arch/tiny-mixtral.gguf");
    auto a = upload_of(path);
    ASSERT_TRUE(a.ok()) << a.message();
    troupe_cuda_model_desc d = a->up->desc;
    d.moe_layers = nullptr;  // as the device model's copy has it
    const int32_t t = 37;
    const cuda::scratch_layout l = cuda::layout_for(d, t);
    const size_t f = sizeof(float);
    EXPECT_EQ(l.moe_logits.bytes, t * 4 * f);   // 4 experts
    EXPECT_EQ(l.moe_experts.bytes, t * 2 * f);  // top 2
    EXPECT_EQ(l.moe_weights.bytes, t * 2 * f);
    EXPECT_EQ(l.moe_hidden.bytes, t * 2 * 256 * f);  // each pair's 256 expert units
    EXPECT_EQ(l.moe_out.bytes, t * 2 * 128 * f);     // each pair's output row of dim 128
    EXPECT_EQ(l.moe_y.bytes, t * 128 * f);
    EXPECT_EQ(l.moe_up.bytes, t * 2 * 256 * f);  // prefill's grouped products: each row's up units
    EXPECT_EQ(l.moe_rows.bytes, t * 2 * 2 * f);  // and the rows' order, both ways (int32)
    std::vector<cuda::scratch_region> regions = {
        l.x,          l.xn,          l.q,           l.k,          l.v,       l.att,   l.gate,   l.up,      l.logits,
        l.moe_logits, l.moe_experts, l.moe_weights, l.moe_hidden, l.moe_out, l.moe_y, l.moe_up, l.moe_rows};
    std::sort(regions.begin(), regions.end(), [](auto& p, auto& q) { return p.offset < q.offset; });
    for (size_t i = 0; i < regions.size(); ++i) {
        EXPECT_EQ(regions[i].offset % 256, 0u);
        EXPECT_LE(regions[i].offset + regions[i].bytes, l.total);
        if (i + 1 < regions.size()) {
            EXPECT_LE(regions[i].offset + regions[i].bytes, regions[i + 1].offset) << i;
        }
    }

    TROUPE_REQUIRE_SHARED(dense_path, "models/arch/tiny-qwen2.gguf");
    auto dense = upload_of(dense_path);
    ASSERT_TRUE(dense.ok()) << dense.message();
    const cuda::scratch_layout dl = cuda::layout_for(dense->up->desc, t);
    for (const auto& r :
         {dl.moe_logits, dl.moe_experts, dl.moe_weights, dl.moe_hidden, dl.moe_out, dl.moe_y, dl.moe_up, dl.moe_rows}) {
        EXPECT_EQ(r.bytes, 0u);
    }
    EXPECT_EQ(dl.moe_rows.offset + dl.moe_rows.bytes, dl.logits.offset + ((dl.logits.bytes + 255) & ~size_t{255}));
}

// The CPU graph's attention for the comparison: the scalar reference, which honours soft-capping and windows.
class ref_attention final : public attention_op {
public:
    std::string name() const override { return "ref"; }
    uint32_t features() const override { return attention_softcap | attention_window; }
    status forward(const attention_call& call, const parallel_for_fn&) override {
        ref::attention(call);
        return {};
    }
};

struct arch_gpu_case {
    const char* model;  // under models/arch/
    bool kv_f16;
};

std::string case_name(const ::testing::TestParamInfo<arch_gpu_case>& info) {
    std::string name = info.param.model;
    for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    }
    return name + (info.param.kv_f16 ? "_kv_f16" : "");
}

class cuda_arch_golden : public ::testing::TestWithParam<arch_gpu_case> {};

TEST_P(cuda_arch_golden, greedy_ids_equal_the_reference_and_first_logits_agree_with_it_and_the_cpu_graph) {
    TROUPE_REQUIRE_GPU();
    const arch_gpu_case& c = GetParam();
    TROUPE_REQUIRE_SHARED(golden_path, "golden/arch-greedy.json");
    TROUPE_REQUIRE_SHARED(model_path, std::string("models/arch/") + c.model);
    std::optional<testing::golden_run> run;
    for (const auto& r : testing::load_golden_runs(golden_path)) {
        if (r.model == c.model) run = r;
    }
    ASSERT_TRUE(run.has_value() && run->first_step.has_value()) << c.model << " has no run in " << golden_path;
    const auto n_new = static_cast<int32_t>(run->generated_ids.size());

    auto weights = testing::load_llama_weights(model_path);
    ASSERT_TRUE(weights.ok()) << weights.message();
    cuda_runner_params p;
    p.block_size = 16;
    p.n_blocks = 64;
    p.kv_f16 = c.kv_f16;
    auto gpu = cuda_runner::create(llama_view_of(weights.value()), p);
    ASSERT_TRUE(gpu.ok()) << gpu.message();
    auto on_gpu = greedy_generate(*gpu.value(), run->prompt_ids, n_new);
    ASSERT_TRUE(on_gpu.ok()) << on_gpu.message();
    EXPECT_EQ(on_gpu->tokens, run->generated_ids) << gpu.value()->description();

    const testing::golden_first_step& fs = *run->first_step;
    const auto& logits = on_gpu->first_logits;
    const auto max_it = std::max_element(logits.begin(), logits.end());
    EXPECT_EQ(max_it - logits.begin(), fs.argmax);
    EXPECT_NEAR(*max_it, fs.max_logit, kLogitTolerance);
    for (size_t i = 0; i < fs.logits_0_7.size(); ++i) {
        EXPECT_NEAR(logits[i], fs.logits_0_7[i], kLogitTolerance) << "logit " << i;
    }

    if (weights.value().hp.mla) {
        // The CPU graph's latent attention is a plugin (attention/mla), which this test does not load: the reference
        // above is the independent check.
        std::printf("  %s%s: matches the reference (no CPU graph comparison for latent attention here)\n", c.model,
                    c.kv_f16 ? " (kv F16)" : "");
        return;
    }
    cpu_llama_params cp;
    cp.attention = std::make_shared<ref_attention>();
    cp.max_seqs = 1;
    auto cpu = cpu_llama::create(std::move(weights.value()), cp);
    ASSERT_TRUE(cpu.ok()) << cpu.message();
    auto on_cpu = greedy_generate(*cpu.value(), run->prompt_ids, n_new);
    ASSERT_TRUE(on_cpu.ok()) << on_cpu.message();
    EXPECT_EQ(on_gpu->tokens, on_cpu->tokens);
    ASSERT_EQ(on_cpu->first_logits.size(), logits.size());
    float worst = 0.0f;
    for (size_t i = 0; i < logits.size(); ++i) worst = std::max(worst, std::fabs(logits[i] - on_cpu->first_logits[i]));
    EXPECT_LT(worst, kLogitTolerance);
    std::printf("  %s%s: first-step logits worst |cuda - cpu| = %.5f\n", c.model, c.kv_f16 ? " (kv F16)" : "", worst);
}

// A prefill longer than the step graphs take (step_graphs::max_tokens) routes its experts grouped: the pairs sorted
// by expert on the host, one product per expert (cuda_model_forward.cpp: moe_grouped). Its greedy tokens and first
// logits agree with the CPU graph's on tiny-mixtral for a 300-token prompt in one step.
TEST(cuda_arch_moe, a_long_prefill_groups_tokens_by_expert_and_agrees_with_the_cpu_graph) {
    TROUPE_REQUIRE_GPU();
    TROUPE_REQUIRE_SHARED(model_path, "models/arch/tiny-mixtral.gguf");
    std::vector<int32_t> prompt(300);
    uint32_t h = 7;
    for (int32_t& id : prompt) id = 1 + static_cast<int32_t>((h = h * 1664525u + 1013904223u) >> 8) % 511;
    const int32_t n_new = 8;

    auto weights = testing::load_llama_weights(model_path);
    ASSERT_TRUE(weights.ok()) << weights.message();
    cuda_runner_params p;
    p.block_size = 16;
    p.n_blocks = 64;
    auto gpu = cuda_runner::create(llama_view_of(weights.value()), p);
    ASSERT_TRUE(gpu.ok()) << gpu.message();
    auto on_gpu = greedy_generate(*gpu.value(), prompt, n_new);
    ASSERT_TRUE(on_gpu.ok()) << on_gpu.message();

    cpu_llama_params cp;
    cp.attention = std::make_shared<ref_attention>();
    cp.max_seqs = 1;
    auto cpu = cpu_llama::create(std::move(weights.value()), cp);
    ASSERT_TRUE(cpu.ok()) << cpu.message();
    auto on_cpu = greedy_generate(*cpu.value(), prompt, n_new);
    ASSERT_TRUE(on_cpu.ok()) << on_cpu.message();
    EXPECT_EQ(on_gpu->tokens, on_cpu->tokens);
    ASSERT_EQ(on_cpu->first_logits.size(), on_gpu->first_logits.size());
    float worst = 0.0f;
    for (size_t i = 0; i < on_cpu->first_logits.size(); ++i) {
        worst = std::max(worst, std::fabs(on_gpu->first_logits[i] - on_cpu->first_logits[i]));
    }
    EXPECT_LT(worst, kLogitTolerance);
    std::printf("  tiny-mixtral, 300-token prefill: first-step logits worst |cuda - cpu| = %.5f\n", worst);
}

INSTANTIATE_TEST_SUITE_P(
    arch_models, cuda_arch_golden,
    ::testing::Values(arch_gpu_case{"tiny-qwen2.gguf", false}, arch_gpu_case{"tiny-phi3.gguf", false},
                      arch_gpu_case{"tiny-gemma2.gguf", false}, arch_gpu_case{"tiny-gemma2.gguf", true},
                      arch_gpu_case{"tiny-mixtral.gguf", false}, arch_gpu_case{"tiny-mixtral.gguf", true},
                      arch_gpu_case{"tiny-deepseek2.gguf", false}, arch_gpu_case{"tiny-deepseek2.gguf", true},
                      arch_gpu_case{"tiny-deepseek2-lite.gguf", false}),
    case_name);

}  // namespace
}  // namespace troupe
