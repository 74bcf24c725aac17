// The plan of `troupe quantize` (core/quantize/quantize_plan.h): types by name, groups in fold order, the F16
// fallback where rows are not whole blocks, and each refusal's message; calibration windows.
#include <gtest/gtest.h>

#include "core/quantize/calibration.h"
#include "core/quantize/quantize_plan.h"

namespace troupe {
namespace {

llama_hparams stories260k_shape() {  // dim 64, 8 heads / 4 kv heads of 8, ffn 172, 5 layers, vocab 512
    llama_hparams hp;
    hp.n_vocab = 512, hp.n_ctx = 512, hp.dim = 64, hp.n_layers = 5, hp.n_heads = 8, hp.n_kv_heads = 4;
    hp.head_dim = 8, hp.ffn_dim = 172;
    return hp;
}

const auto writes_all = [](ggml_type, int64_t) { return true; };

// Architectures whose tensors differ from llama's (core/model/arch): phi3's fused attn_qkv and gate/up are one group
// each, and input scales fold into a linear's rows only where those rows are a tensor of their own without a bias.
TEST(quantize_plan, fused_tensors_are_one_group_and_scales_fold_only_into_whole_unbiased_rows) {
    llama_hparams phi3 = stories260k_shape();
    phi3.arch = &phi3_description();
    phi3.n_kv_heads = phi3.n_heads;  // MHA, as tiny-phi3: attn_output's input channels are v's rows
    auto plan = make_quantize_plan(phi3, false, ggml_type::q8_0, "rtn", writes_all);
    ASSERT_TRUE(plan.ok()) << plan.message();
    const planned_group* qkv = plan->group_of("blk.2.attn_qkv.weight");
    ASSERT_NE(qkv, nullptr);
    EXPECT_EQ(qkv->n_out, (std::vector<int64_t>{3 * 64}));
    EXPECT_EQ(qkv->fold_into, "blk.2.attn_norm.weight");
    const planned_group* gate_up = plan->group_of("blk.2.ffn_up.weight");
    ASSERT_NE(gate_up, nullptr);
    EXPECT_EQ(gate_up->n_out, (std::vector<int64_t>{2 * 172}));
    EXPECT_EQ(plan->group_of("blk.2.attn_q.weight"), nullptr);
    EXPECT_EQ(plan->group_of("blk.2.ffn_gate.weight"), nullptr);
    EXPECT_EQ(plan->group_of("blk.2.ffn_down.weight")->fold, fold_kind::none);     // up is half of a fused tensor
    EXPECT_EQ(plan->group_of("blk.2.attn_output.weight")->fold, fold_kind::none);  // v is a third of one

    llama_hparams qwen2 = stories260k_shape();
    qwen2.arch = &qwen2_description();
    qwen2.n_kv_heads = qwen2.n_heads;
    auto biased = make_quantize_plan(qwen2, true, ggml_type::q8_0, "rtn", writes_all);
    ASSERT_TRUE(biased.ok()) << biased.message();
    EXPECT_EQ(biased->group_of("blk.0.attn_output.weight")->fold, fold_kind::none);  // attn_v.bias would need it too
    EXPECT_EQ(biased->group_of("blk.0.ffn_down.weight")->fold, fold_kind::rows);
    llama_hparams llama_mha = qwen2;
    llama_mha.arch = &llama_description();
    auto plain = make_quantize_plan(llama_mha, true, ggml_type::q8_0, "rtn", writes_all);
    ASSERT_TRUE(plain.ok()) << plain.message();
    EXPECT_EQ(plain->group_of("blk.0.attn_output.weight")->fold, fold_kind::rows);
}

TEST(quantize_plan, types_are_named_as_the_command_takes_them) {
    struct tcase {
        const char* name;
        std::optional<int64_t> group;
        std::optional<ggml_type> want;
        const char* error;
    };
    const tcase cases[] = {
        {"q4_0", {}, ggml_type::q4_0, ""},
        {"Q8_0", {}, ggml_type::q8_0, ""},
        {"q4_k", {}, ggml_type::q4_k, ""},
        {"w4_g128", {}, ggml_type::w4_g128, ""},
        {"w4", 32, ggml_type::q4_1, ""},
        {"w4", 64, ggml_type::w4_g64, ""},
        {"w4", 128, ggml_type::w4_g128, ""},
        {"q4_1", 32, ggml_type::q4_1, ""},
        {"w4", {}, {}, "--type w4 needs --group 32, 64 or 128 (the weights per scale and zero point)"},
        {"w4", 48, {}, "--group 48: must be 32, 64 or 128"},
        {"q4_0", 64, {}, "--group 64 does not fit --type q4_0 (its groups are 32 weights)"},
        {"q5_9",
         {},
         {},
         "--type 'q5_9': unknown (valid: q4_0, q4_1, q4_k, q8_0, w4_g64, w4_g128, w4 (with --group 32|64|128))"},
    };
    for (const tcase& c : cases) {
        SCOPED_TRACE(c.name);
        auto t = parse_quantize_type(c.name, c.group);
        if (c.want) {
            ASSERT_TRUE(t.ok()) << t.message();
            EXPECT_EQ(*t, *c.want);
        } else {
            ASSERT_FALSE(t.ok());
            EXPECT_EQ(t.message(), c.error);
        }
    }
}

TEST(quantize_plan, groups_run_down_output_proj_gate_up_qkv_per_layer_then_the_output_with_their_folds) {
    auto plan = make_quantize_plan(stories260k_shape(), false, ggml_type::q8_0, "rtn", writes_all);
    ASSERT_TRUE(plan.ok()) << plan.message();
    ASSERT_EQ(plan->groups.size(), 21u);
    const planned_group* g = plan->groups.data();
    EXPECT_EQ(g[0].weights, (std::vector<std::string>{"blk.0.ffn_down.weight"}));
    EXPECT_EQ(g[0].input, tap_point::ffn_hidden);
    EXPECT_EQ(g[0].fold, fold_kind::rows);
    EXPECT_EQ(g[0].fold_into, "blk.0.ffn_up.weight");
    EXPECT_EQ(g[1].weights, (std::vector<std::string>{"blk.0.attn_output.weight"}));
    EXPECT_EQ(g[1].fold, fold_kind::none);  // 8 heads share 4 kv heads: a v row feeds two channels
    EXPECT_EQ(g[2].weights, (std::vector<std::string>{"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"}));
    EXPECT_EQ(g[2].fold_into, "blk.0.ffn_norm.weight");
    EXPECT_EQ(g[3].weights,
              (std::vector<std::string>{"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"}));
    EXPECT_EQ(g[3].n_out, (std::vector<int64_t>{64, 32, 32}));
    EXPECT_EQ(g[3].fold_into, "blk.0.attn_norm.weight");
    EXPECT_EQ(g[20].weights, (std::vector<std::string>{"output.weight"}));
    EXPECT_EQ(g[20].layer, -1);
    EXPECT_EQ(g[20].fold_into, "output_norm.weight");
    EXPECT_EQ(g[20].type, ggml_type::q8_0);  // a Q8_0 file keeps its output matrix in Q8_0
    EXPECT_TRUE(g[20].by_method);
    EXPECT_EQ(plan->n_fallback, 5);  // ffn_down: rows of 172 are not whole blocks of 32
    EXPECT_FALSE(g[0].by_method);
    EXPECT_EQ(g[0].type, ggml_type::f16);
    EXPECT_EQ(g[1].type, ggml_type::q8_0);

    llama_hparams mha = stories260k_shape();
    mha.n_kv_heads = mha.n_heads;
    auto tied = make_quantize_plan(mha, true, ggml_type::q8_0, "rtn", writes_all);
    ASSERT_TRUE(tied.ok());
    EXPECT_EQ(tied->groups.size(), 20u);  // a tied output is token_embd, which keeps its type
    EXPECT_EQ(tied->groups[1].fold, fold_kind::rows);
    EXPECT_EQ(tied->groups[1].fold_into, "blk.0.attn_v.weight");
}

TEST(quantize_plan, a_type_no_linear_can_take_or_a_method_refusal_is_one_error) {
    auto q4k = make_quantize_plan(stories260k_shape(), false, ggml_type::q4_k, "rtn", writes_all);
    ASSERT_FALSE(q4k.ok());
    EXPECT_EQ(q4k.message(),
              "no linear of the model can be written as Q4_K: its rows (172, 64 weights) are not multiples of Q4_K's "
              "blocks of 256; choose a type with smaller blocks (q8_0, q4_0)");
    auto refused = make_quantize_plan(stories260k_shape(), false, ggml_type::q4_0, "gptq",
                                      [](ggml_type, int64_t n_in) { return n_in != 64; });
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.message(),
              "method gptq cannot write Q4_0 for rows of 64 weights (the model's linears need it); choose another "
              "--type or --method");
}

TEST(quantize_plan, the_output_matrix_takes_its_own_type_and_a_float_one_is_converted_by_the_host) {
    auto q8 = make_quantize_plan(stories260k_shape(), false, ggml_type::q4_0, "rtn", writes_all, ggml_type::q8_0);
    ASSERT_TRUE(q8.ok()) << q8.message();
    EXPECT_EQ(q8->groups.back().type, ggml_type::q8_0);
    EXPECT_TRUE(q8->groups.back().by_method);
    EXPECT_EQ(q8->groups[1].type, ggml_type::q4_0);
    auto f16 = make_quantize_plan(stories260k_shape(), false, ggml_type::q4_0, "rtn", writes_all, ggml_type::f16);
    ASSERT_TRUE(f16.ok());
    EXPECT_EQ(f16->groups.back().type, ggml_type::f16);
    EXPECT_FALSE(f16->groups.back().by_method);
    EXPECT_EQ(f16->n_fallback, 5);  // only the ffn_down groups fall back
    // The method is asked for the output's type too, and its refusal names it.
    auto refused = make_quantize_plan(
        stories260k_shape(), false, ggml_type::q4_0, "awq", [](ggml_type t, int64_t) { return t != ggml_type::q8_0; },
        ggml_type::q8_0);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.message(),
              "method awq cannot write Q8_0 for rows of 64 weights (the model's linears need it); choose another "
              "--type or --method");
    EXPECT_EQ(*parse_output_type("f16"), ggml_type::f16);
    EXPECT_EQ(*parse_output_type("q6_k"), ggml_type::q6_k);
    EXPECT_EQ(parse_output_type("q9").message(),
              "--output-type 'q9': unknown (valid: q4_0, q4_1, q4_k, q6_k, q8_0, w4_g64, w4_g128, f16, f32)");
    // An explicit Q6_K is the host's too; on rows of 64 (not whole blocks of 256) it falls back to F16.
    auto q6 = make_quantize_plan(stories260k_shape(), false, ggml_type::q4_0, "rtn", writes_all, ggml_type::q6_k);
    ASSERT_TRUE(q6.ok()) << q6.message();
    EXPECT_EQ(q6->groups.back().type, ggml_type::f16);
    EXPECT_EQ(q6->n_fallback, 6);
}

TEST(quantize_plan, the_default_output_type_follows_llama_cpp_q6_k_for_4_bit_files_q8_0_where_rows_are_not_256s) {
    struct tcase {
        ggml_type target;
        int64_t n_in;
        ggml_type want;
    };
    const tcase cases[] = {
        {ggml_type::q4_0, 64, ggml_type::q8_0},    {ggml_type::q4_0, 256, ggml_type::q6_k},
        {ggml_type::q4_1, 4096, ggml_type::q6_k},  {ggml_type::q4_k, 256, ggml_type::q6_k},
        {ggml_type::w4_g64, 192, ggml_type::q8_0}, {ggml_type::w4_g128, 512, ggml_type::q6_k},
        {ggml_type::q8_0, 256, ggml_type::q8_0},   {ggml_type::f16, 256, ggml_type::f16},
    };
    for (const tcase& c : cases) {
        SCOPED_TRACE(std::string(traits(c.target).name) + " rows of " + std::to_string(c.n_in));
        EXPECT_EQ(default_output_type(c.target, c.n_in), c.want);
    }
    // rand10M's shape (dim 256): a Q4_0 file's output matrix is Q6_K, written by the host (no method writes Q6_K);
    // stories260K's (dim 64) is Q8_0 by the method, or by the host where the method cannot write Q8_0.
    llama_hparams wide = stories260k_shape();
    wide.dim = 256, wide.head_dim = 32, wide.ffn_dim = 768;
    auto q6 = make_quantize_plan(wide, false, ggml_type::q4_0, "gptq", writes_all);
    ASSERT_TRUE(q6.ok()) << q6.message();
    EXPECT_EQ(q6->groups.back().type, ggml_type::q6_k);
    EXPECT_FALSE(q6->groups.back().by_method);
    EXPECT_EQ(q6->groups[1].type, ggml_type::q4_0);
    auto q8 = make_quantize_plan(stories260k_shape(), false, ggml_type::w4_g64, "gptq", writes_all);
    ASSERT_TRUE(q8.ok()) << q8.message();
    EXPECT_EQ(q8->groups.back().type, ggml_type::q8_0);
    EXPECT_TRUE(q8->groups.back().by_method);
    auto only_q4 = make_quantize_plan(stories260k_shape(), false, ggml_type::q4_0, "rtn",
                                      [](ggml_type t, int64_t) { return t == ggml_type::q4_0; });
    ASSERT_TRUE(only_q4.ok()) << only_q4.message();
    EXPECT_EQ(only_q4->groups.back().type, ggml_type::q8_0);
    EXPECT_FALSE(only_q4->groups.back().by_method);
    EXPECT_NE(describe(*q6).find("output: output [512 x 256] -> Q6_K (the default for the output matrix) by the host, "
                                 "input output_norm\n"),
              std::string::npos)
        << describe(*q6);
}

TEST(quantize_plan, the_description_names_each_group_its_type_and_fold) {
    auto plan = make_quantize_plan(stories260k_shape(), false, ggml_type::q4_0, "rtn", writes_all);
    ASSERT_TRUE(plan.ok());
    const std::string d = describe(*plan);
    EXPECT_NE(d.find("blk.0: ffn_down [64 x 172] -> F16 (rows of 172 are not a whole number of Q4_0's blocks of 32), "
                     "input ffn_hidden\n"),
              std::string::npos)
        << d;
    EXPECT_NE(d.find("output: output [512 x 64] -> Q8_0 (the default for the output matrix), input output_norm, "
                     "scales fold into output_norm.weight\n"),
              std::string::npos)
        << d;
}

TEST(calibration, a_text_shorter_than_one_window_is_refused_with_both_counts) {
    calibration_options o;
    o.n_ctx = 256;
    EXPECT_EQ(*calibration_windows(1000, o), 3);
    auto short_text = calibration_windows(200, o);
    ASSERT_FALSE(short_text.ok());
    EXPECT_EQ(short_text.message(),
              "the calibration text is 200 tokens, fewer than one window of --ctx 256: give a longer text or a "
              "smaller --ctx");
    o.max_tokens = 100;
    auto capped = calibration_windows(1000, o);
    ASSERT_FALSE(capped.ok());
    EXPECT_EQ(capped.message(),
              "the calibration text is 1000 tokens (--calib-tokens 100), fewer than one window of --ctx 256: give a "
              "longer text or a smaller --ctx");
}

}  // namespace
}  // namespace troupe
