// The architecture descriptions (core/model/arch/) and the binding of a file's tensors under them, on tiny files
// written here: the registry's error for an architecture troupe does not know, one error for a missing or misfit
// tensor (the file, the tensor, its expected shape), fused tensors bound as row views of one tensor, tied outputs,
// and the hyper-parameters each architecture reads from its own keys (windows, soft-capping, scales).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <set>
#include <string>

#include "core/gguf/gguf_writer.h"
#include "core/model/arch/arch_registry.h"
#include "core/model/llama_weights.h"

namespace troupe {
namespace {

// A tiny file of `arch`: dim 8, 2 heads of 4 (1 KV head), FFN 16, 2 layers, vocabulary 12; F32 zeros throughout.
// The tensors are those the description implies, less `skip`; `edit` may change the metadata.
struct tiny_spec {
    std::string arch;
    std::set<std::string> skip;
    std::function<void(gguf::gguf_writer&)> edit;
};

std::string write_tiny(const tiny_spec& spec) {
    const arch_description* d = find_architecture(spec.arch);
    gguf::gguf_writer w;
    w.set_string("general.architecture", spec.arch);
    const std::string a = spec.arch + ".";
    w.set_u32(a + "context_length", 64);
    w.set_u32(a + "embedding_length", 8);
    w.set_u32(a + "block_count", 2);
    w.set_u32(a + "feed_forward_length", 16);
    w.set_u32(a + "attention.head_count", 2);
    w.set_u32(a + "attention.head_count_kv", 1);
    w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
    if (spec.edit) spec.edit(w);
    auto add = [&](const std::string& name, std::vector<int64_t> dims) {
        if (spec.skip.count(name)) return;
        size_t n = 1;
        for (int64_t x : dims) n *= static_cast<size_t>(x);
        const std::vector<float> zeros(n, 0.0f);
        w.add_tensor_f32(name, dims, zeros);
    };
    add("token_embd.weight", {8, 12});
    add("output_norm.weight", {8});
    if (d == nullptr || d->name != "qwen2") add("output.weight", {8, 12});
    for (int l = 0; l < 2; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        add(p + "attn_norm.weight", {8});
        if (d != nullptr && d->fused_qkv) {
            add(p + "attn_qkv.weight", {8, 16});
        } else {
            add(p + "attn_q.weight", {8, 8});
            add(p + "attn_k.weight", {8, 4});
            add(p + "attn_v.weight", {8, 4});
        }
        if (d != nullptr && d->qkv_bias) {
            add(p + "attn_q.bias", {8});
            add(p + "attn_k.bias", {4});
            add(p + "attn_v.bias", {4});
        }
        add(p + "attn_output.weight", {8, 8});
        add(p + "ffn_norm.weight", {8});
        if (d != nullptr && d->fused_gate_up) {
            add(p + "ffn_up.weight", {8, 32});
        } else {
            add(p + "ffn_gate.weight", {8, 16});
            add(p + "ffn_up.weight", {8, 16});
        }
        add(p + "ffn_down.weight", {16, 8});
        if (d != nullptr && d->post_norms) {
            add(p + "post_attention_norm.weight", {8});
            add(p + "post_ffw_norm.weight", {8});
        }
    }
    static int counter = 0;
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("troupe_arch_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".gguf"))
                                 .string();
    EXPECT_TRUE(w.write(path).ok());
    return path;
}

result<llama_weights> bind_tiny(const tiny_spec& spec) {
    const std::string path = write_tiny(spec);
    auto f = gguf::gguf_file::open(path);
    std::filesystem::remove(path);  // the mapping stays valid
    if (!f.ok()) return f.err();
    return bind_llama_weights(*f);
}

TEST(arch_registry, an_unknown_architecture_is_one_error_naming_it_and_the_known_ones) {
    auto w = bind_tiny({"falcon", {}, {}});
    ASSERT_FALSE(w.ok());
    const std::string& m = w.message();
    EXPECT_NE(m.find("general.architecture is 'falcon', which troupe does not know"), std::string::npos) << m;
    EXPECT_NE(m.find("(it knows: " + known_architectures() + ")"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
    for (const char* known : {"llama", "mistral", "qwen2", "phi3", "gemma2"}) {
        EXPECT_NE(known_architectures().find(known), std::string::npos) << known;
        ASSERT_NE(find_architecture(known), nullptr) << known;
    }
}

TEST(arch_weights, a_missing_tensor_is_one_error_naming_the_file_the_tensor_and_its_shape) {
    auto w = bind_tiny({"qwen2", {"blk.1.attn_k.bias", "blk.0.ffn_down.weight"}, {}});
    ASSERT_FALSE(w.ok());
    const std::string& m = w.message();
    EXPECT_NE(m.find(".gguf: tensor blk.0.ffn_down.weight is missing; qwen2 expects it with shape [16, 8]"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("(and 1 more tensors missing or misfit)"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;

    auto bias = bind_tiny({"qwen2", {"blk.1.attn_k.bias"}, {}});
    ASSERT_FALSE(bias.ok());
    EXPECT_NE(bias.message().find("tensor blk.1.attn_k.bias is missing; qwen2 expects it with shape [4] F32"),
              std::string::npos)
        << bias.message();
}

TEST(arch_weights, a_tensor_of_a_type_troupe_cannot_compute_with_is_one_error_listing_the_types_it_can) {
    const tiny_spec spec{"llama", {"blk.0.ffn_down.weight"}, [](gguf::gguf_writer& w) {
                             w.add_tensor("blk.0.ffn_down.weight", ggml_type::i16, {16, 8}, std::vector<uint8_t>(256));
                         }};
    auto w = bind_tiny(spec);
    ASSERT_FALSE(w.ok());
    const std::string& m = w.message();
    EXPECT_NE(m.find("tensor blk.0.ffn_down.weight has type I16, which troupe cannot compute with (supported: " +
                     computable_type_names() + ")"),
              std::string::npos)
        << m;
    for (const char* type :
         {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "W4_G64"})
        EXPECT_NE(computable_type_names().find(type), std::string::npos) << type;
    EXPECT_EQ(computable_type_names().find("IQ2_XXS"), std::string::npos);
}

TEST(arch_weights, a_fused_tensor_of_the_wrong_size_names_its_expected_shape) {
    auto w = bind_tiny({"phi3", {"blk.0.attn_qkv.weight"}, {}});
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.message().find("tensor blk.0.attn_qkv.weight is missing; phi3 expects it with shape [8, 16]"),
              std::string::npos)
        << w.message();
}

TEST(arch_weights, phi3s_fused_tensors_are_bound_as_row_views_of_one_tensor) {
    auto w = bind_tiny({"phi3", {}, {}});
    ASSERT_TRUE(w.ok()) << w.message();
    const llama_layer_weights& l = w->layers[1];
    const size_t row = 8 * sizeof(float);
    EXPECT_EQ(l.wq.n_out, 8);
    EXPECT_EQ(l.wk.n_out, 4);
    EXPECT_EQ(l.wv.n_out, 4);
    EXPECT_EQ(static_cast<const uint8_t*>(l.wk.data), static_cast<const uint8_t*>(l.wq.data) + 8 * row);
    EXPECT_EQ(static_cast<const uint8_t*>(l.wv.data), static_cast<const uint8_t*>(l.wq.data) + 12 * row);
    EXPECT_EQ(l.w_gate.n_out, 16);
    EXPECT_EQ(l.w_up.n_out, 16);
    EXPECT_EQ(static_cast<const uint8_t*>(l.w_up.data), static_cast<const uint8_t*>(l.w_gate.data) + 16 * row);
    EXPECT_EQ(w->hp.rope, rope_mode::neox);
}

TEST(arch_weights, qwen2_without_an_output_matrix_ties_it_to_the_embeddings_and_binds_biases) {
    auto w = bind_tiny({"qwen2", {}, {}});
    ASSERT_TRUE(w.ok()) << w.message();
    EXPECT_TRUE(w->tied_output);
    EXPECT_EQ(w->output.data, w->token_embd.data);
    EXPECT_NE(w->layers[0].bq.data, nullptr);
    EXPECT_EQ(w->layers[0].bk.n_in, 4);
    EXPECT_EQ(w->hp.rope, rope_mode::neox);
}

TEST(arch_hparams, gemma2_reads_its_windows_soft_caps_and_embedding_scale_from_its_own_keys) {
    auto w = bind_tiny({"gemma2", {}, [](gguf::gguf_writer& g) {
                            g.set_u32("gemma2.attention.sliding_window", 4);
                            g.set_f32("gemma2.attn_logit_softcapping", 50.0f);
                            g.set_f32("gemma2.final_logit_softcapping", 30.0f);
                            g.set_u32("gemma2.attention.key_length", 6);  // heads wider than dim / n_heads
                            g.set_u32("gemma2.attention.value_length", 6);
                        }});
    // key_length 6 makes q 12 rows wide, which the tiny file's attn_q (8 rows) is not: one shape error.
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.message().find("tensor blk.0.attn_q.weight has shape [8, 8], expected [8, 12]"), std::string::npos)
        << w.message();

    auto g = bind_tiny({"gemma2", {}, [](gguf::gguf_writer& g) {
                            g.set_u32("gemma2.attention.sliding_window", 4);
                            g.set_f32("gemma2.attn_logit_softcapping", 50.0f);
                            g.set_f32("gemma2.final_logit_softcapping", 30.0f);
                        }});
    ASSERT_TRUE(g.ok()) << g.message();
    const llama_hparams& hp = g->hp;
    EXPECT_EQ(hp.window_of(0), 4);
    EXPECT_EQ(hp.window_of(1), 0);
    EXPECT_FLOAT_EQ(hp.attn_softcap, 50.0f);
    EXPECT_FLOAT_EQ(hp.final_softcap, 30.0f);
    EXPECT_FLOAT_EQ(hp.embed_scale, std::sqrt(8.0f));
    EXPECT_EQ(hp.arch->activation, ffn_activation::gelu_tanh);
    EXPECT_NE(g->layers[1].post_ffn_norm.data, nullptr);
}

TEST(arch_hparams, longrope_factors_are_refused_naming_the_tensor) {
    auto w = bind_tiny({"phi3", {}, [](gguf::gguf_writer& g) {
                            const std::vector<float> ones(2, 1.0f);
                            g.add_tensor_f32("rope_factors_long.weight", {2}, ones);
                        }});
    ASSERT_FALSE(w.ok());
    EXPECT_NE(
        w.message().find(".gguf: tensor rope_factors_long.weight asks for LongRoPE frequency factors (phi3 with a "
                         "long context), which troupe does not apply yet"),
        std::string::npos)
        << w.message();
}

TEST(arch_hparams, a_window_that_covers_the_training_context_takes_no_effect) {
    auto w = bind_tiny({"phi3", {}, [](gguf::gguf_writer& g) { g.set_u32("phi3.attention.sliding_window", 64); }});
    ASSERT_TRUE(w.ok()) << w.message();
    EXPECT_FALSE(w->hp.any_window());
    auto m =
        bind_tiny({"mistral", {}, [](gguf::gguf_writer& g) { g.set_u32("mistral.attention.sliding_window", 16); }});
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_EQ(m->hp.window_of(0), 16);
    EXPECT_EQ(m->hp.window_of(1), 16);
}

// Graphs that implement llama's only (the CUDA runner, distillation's float graph) refuse with this description.
TEST(arch_hparams, what_a_model_needs_beyond_the_llama_graph_is_named_per_architecture) {
    auto llama = bind_tiny({"mistral", {}, {}});
    ASSERT_TRUE(llama.ok()) << llama.message();
    EXPECT_EQ(beyond_llama_graph(llama->hp), "");
    auto qwen2 = bind_tiny({"qwen2", {}, {}});
    ASSERT_TRUE(qwen2.ok()) << qwen2.message();
    EXPECT_EQ(beyond_llama_graph(qwen2->hp), "architecture qwen2 (q/k/v biases)");
    auto gemma2 =
        bind_tiny({"gemma2", {}, [](gguf::gguf_writer& g) { g.set_u32("gemma2.attention.sliding_window", 4); }});
    ASSERT_TRUE(gemma2.ok()) << gemma2.message();
    EXPECT_EQ(beyond_llama_graph(gemma2->hp),
              "architecture gemma2 (a GeGLU FFN, post-attention and post-FFN norms, scaled embeddings, sliding-window "
              "attention)");
}

}  // namespace
}  // namespace troupe
