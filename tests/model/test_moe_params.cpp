// moe_params from an architecture's expert keys, and one MoE layer's tensors bound by name, on tiny files written
// here: the defaults each architecture gets (Mixtral's renormalised softmax, the expert size from the dense FFN's),
// the keys that change them, one clear error for each bad key naming the file and the key, and a misfit expert tensor
// named with its expected shape.
#include <gtest/gtest.h>

#include <unistd.h>

#include <functional>
#include <string>

#include "core/gguf/gguf_writer.h"
#include "core/model/moe_params.h"

namespace troupe {
namespace {

// A file with `arch`'s expert keys as `edit` sets them and layer 1's MoE tensors (dim 8, 4 experts of 6 units, one
// shared expert when the keys ask for it), F32 zeros; `bad_tensor` replaces ffn_up_exps with a misfit shape.
std::string write_moe_file(const std::string& arch, const std::function<void(gguf::gguf_writer&)>& edit,
                           bool bad_tensor = false) {
    gguf::gguf_writer w;
    w.set_string("general.architecture", arch);
    edit(w);
    auto add = [&](const std::string& name, std::vector<int64_t> dims) {
        size_t n = 1;
        for (int64_t x : dims) n *= static_cast<size_t>(x);
        w.add_tensor_f32(name, dims, std::vector<float>(n, 0.0f));
    };
    add("blk.1.ffn_gate_inp.weight", {8, 4});
    add("blk.1.ffn_gate_exps.weight", {8, 6, 4});
    add("blk.1.ffn_up_exps.weight", bad_tensor ? std::vector<int64_t>{8, 6, 3} : std::vector<int64_t>{8, 6, 4});
    add("blk.1.ffn_down_exps.weight", {6, 8, 4});
    add("blk.1.ffn_gate_shexp.weight", {8, 6});
    add("blk.1.ffn_up_shexp.weight", {8, 6});
    add("blk.1.ffn_down_shexp.weight", {6, 8});
    const std::string path = ::testing::TempDir() + "moe-" + std::to_string(::getpid()) + ".gguf";
    EXPECT_TRUE(w.write(path).ok());
    return path;
}

result<std::optional<moe_params>> read(const std::string& arch, const std::function<void(gguf::gguf_writer&)>& edit,
                                       int32_t ffn_dim = 6) {
    auto f = gguf::gguf_file::open(write_moe_file(arch, edit));
    if (!f.ok()) return f.err();
    return read_moe_params(**f, arch, 3, ffn_dim);
}

TEST(moe_params, a_model_without_expert_count_has_no_experts) {
    auto p = read("llama", [](gguf::gguf_writer&) {});
    ASSERT_TRUE(p.ok()) << p.message();
    EXPECT_FALSE(p->has_value());
}

TEST(moe_params, mixtral_renormalises_a_softmax_top_k_over_experts_of_the_dense_ffn_size) {
    auto p = read(
        "llama",
        [](gguf::gguf_writer& w) {
            w.set_u32("llama.expert_count", 4);
            w.set_u32("llama.expert_used_count", 2);
        },
        6);
    ASSERT_TRUE(p.ok()) << p.message();
    ASSERT_TRUE(p->has_value());
    const moe_params& m = **p;
    EXPECT_EQ(m.n_experts, 4);
    EXPECT_EQ(m.n_used, 2);
    EXPECT_EQ(m.n_shared, 0);
    EXPECT_EQ(m.expert_ffn, 6);
    EXPECT_EQ(m.n_leading_dense, 0);
    EXPECT_EQ(m.gating, moe_gating::softmax);
    EXPECT_TRUE(m.norm_weights);
    EXPECT_EQ(m.weights_scale, 1.0f);
}

TEST(moe_params, deepseek2_reads_its_shared_experts_dense_layers_gating_norm_and_scale) {
    auto p = read("deepseek2", [](gguf::gguf_writer& w) {
        w.set_u32("deepseek2.expert_count", 4);
        w.set_u32("deepseek2.expert_used_count", 2);
        w.set_u32("deepseek2.expert_shared_count", 1);
        w.set_u32("deepseek2.expert_feed_forward_length", 6);
        w.set_u32("deepseek2.leading_dense_block_count", 1);
        w.set_u32("deepseek2.expert_gating_func", 2);
        w.set_bool("deepseek2.expert_weights_norm", true);
        w.set_f32("deepseek2.expert_weights_scale", 2.5f);
    });
    ASSERT_TRUE(p.ok()) << p.message();
    ASSERT_TRUE(p->has_value());
    const moe_params& m = **p;
    EXPECT_EQ(m.n_shared, 1);
    EXPECT_EQ(m.shared_ffn(), 6);
    EXPECT_EQ(m.n_leading_dense, 1);
    EXPECT_FALSE(m.is_moe_layer(0));
    EXPECT_TRUE(m.is_moe_layer(1));
    EXPECT_EQ(m.gating, moe_gating::sigmoid);
    EXPECT_TRUE(m.norm_weights);
    EXPECT_EQ(m.weights_scale, 2.5f);

    // Without the norm key deepseek2 keeps the top k's own probabilities (DeepSeek-V2).
    auto plain = read("deepseek2", [](gguf::gguf_writer& w) {
        w.set_u32("deepseek2.expert_count", 4);
        w.set_u32("deepseek2.expert_used_count", 2);
    });
    ASSERT_TRUE(plain.ok()) << plain.message();
    EXPECT_FALSE((*plain)->norm_weights);
    EXPECT_EQ((*plain)->gating, moe_gating::softmax);
}

TEST(moe_params, bad_expert_keys_are_one_error_naming_the_file_and_the_key) {
    struct bad_case {
        std::function<void(gguf::gguf_writer&)> edit;
        std::string message;
    };
    const std::vector<bad_case> cases{
        {[](gguf::gguf_writer& w) { w.set_u32("llama.expert_count", 4); },
         "llama.expert_count is 4 but llama.expert_used_count (experts per token) is missing"},
        {[](gguf::gguf_writer& w) {
             w.set_u32("llama.expert_count", 4);
             w.set_u32("llama.expert_used_count", 5);
         },
         "llama.expert_used_count = 5 must be from 1 to llama.expert_count (4)"},
        {[](gguf::gguf_writer& w) {
             w.set_u32("llama.expert_count", 4);
             w.set_u32("llama.expert_used_count", 2);
             w.set_u32("llama.expert_gating_func", 3);
         },
         "llama.expert_gating_func = 3 is not supported (1: softmax, 2: sigmoid)"},
        {[](gguf::gguf_writer& w) {
             w.set_u32("llama.expert_count", 4);
             w.set_u32("llama.expert_used_count", 2);
             w.set_f32("llama.expert_weights_scale", -1.0f);
         },
         "llama.expert_weights_scale = -1.000000 must be a positive number"},
        {[](gguf::gguf_writer& w) { w.set_string("llama.expert_count", "eight"); },
         "llama.expert_count has type string, expected an unsigned integer"},
    };
    for (const bad_case& c : cases) {
        auto p = read("llama", c.edit);
        ASSERT_FALSE(p.ok()) << c.message;
        EXPECT_NE(p.message().find(c.message), std::string::npos) << p.message();
        EXPECT_NE(p.message().find("moe-"), std::string::npos) << "names the file: " << p.message();
    }
}

TEST(moe_params, a_misfit_expert_tensor_is_named_with_its_expected_shape) {
    moe_params p;
    p.n_experts = 4;
    p.n_used = 2;
    p.n_shared = 1;
    p.expert_ffn = 6;
    for (const bool bad : {false, true}) {
        auto f = gguf::gguf_file::open(write_moe_file(
            "deepseek2", [](gguf::gguf_writer&) {}, bad));
        ASSERT_TRUE(f.ok()) << f.message();
        std::string errors;
        const moe_layer_weights w = bind_moe_layer(**f, p, 1, 8, errors);
        if (!bad) {
            EXPECT_EQ(errors, "");
            EXPECT_EQ(w.gate_exps.n_out, 24);  // 4 experts of 6 rows
            EXPECT_EQ(w.down_exps.n_in, 6);
            EXPECT_EQ(w.up_shexp.n_out, 6);
            const weight_view e2 = expert_matrix(w.gate_exps, 4, 2);
            EXPECT_EQ(e2.n_out, 6);
            EXPECT_EQ(static_cast<const uint8_t*>(e2.data) - static_cast<const uint8_t*>(w.gate_exps.data),
                      2 * 6 * 8 * 4);
            continue;
        }
        EXPECT_NE(errors.find("tensor blk.1.ffn_up_exps.weight has shape [8, 6, 3], expected [8, 6, 4]"),
                  std::string::npos)
            << errors;
    }
}

}  // namespace
}  // namespace troupe
