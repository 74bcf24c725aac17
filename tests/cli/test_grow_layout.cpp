// grow_layout: where a stories260K-shaped source lands in larger shapes, worked out by hand from the rules in
// cli/grow_layout.h, and the refusals of shapes that cannot hold it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cli/grow_layout.h"

namespace troupe::cli {
namespace {

// stories260K's shape: dim 64, 5 layers, 8 q heads and 4 kv heads of 8, FFN 172, all head dims rotated.
llama_hparams stories_shape() {
    llama_hparams hp;
    hp.architecture = "llama";
    hp.n_vocab = 512;
    hp.n_ctx = 512;
    hp.dim = 64;
    hp.n_layers = 5;
    hp.n_heads = 8;
    hp.n_kv_heads = 4;
    hp.head_dim = 8;
    hp.ffn_dim = 172;
    hp.rms_eps = 1e-5f;
    hp.rope_dims = 8;
    return hp;
}

struct layout_case {
    synth_shape shape;
    std::vector<int32_t> q_head_of;
    std::vector<int32_t> kv_source;
    std::vector<int32_t> head_dim_of;
    std::vector<int32_t> layer_of;
};

void PrintTo(const layout_case& c, std::ostream* os) {
    *os << c.shape.name;
}

class grow_layout_places : public ::testing::TestWithParam<layout_case> {};

TEST_P(grow_layout_places, source_heads_dims_and_layers_where_the_rules_put_them) {
    const layout_case& c = GetParam();
    const llama_hparams s = stories_shape();
    auto g = plan_growth(s, c.shape, "stories260K.gguf");
    ASSERT_TRUE(g.ok()) << g.message();
    EXPECT_EQ(g->q_head_of, c.q_head_of);
    EXPECT_EQ(g->kv_source, c.kv_source);
    EXPECT_EQ(g->head_dim_of, c.head_dim_of);
    EXPECT_EQ(g->layer_of, c.layer_of);
    for (size_t i = 0; i < c.layer_of.size(); ++i)
        EXPECT_EQ(g->source_layer[static_cast<size_t>(c.layer_of[i])], static_cast<int32_t>(i));
    EXPECT_EQ(g->n_identity_layers(), c.shape.n_layers - s.n_layers);

    const llama_hparams& t = g->target;
    const int32_t k = t.head_dim / s.head_dim;
    EXPECT_EQ(t.rope_dims, s.rope_dims * k);
    EXPECT_FLOAT_EQ(g->q_scale * g->q_scale, static_cast<float>(k));
    // RMSNorm over D channels with eps * d/D is sqrt(d/D) times the one over d: norm weights carry the inverse.
    EXPECT_FLOAT_EQ(t.rms_eps, s.rms_eps * static_cast<float>(s.dim) / static_cast<float>(t.dim));
    EXPECT_FLOAT_EQ(g->norm_scale * g->norm_scale, static_cast<float>(s.dim) / static_cast<float>(t.dim));
    EXPECT_EQ(t.n_ctx, std::max(s.n_ctx, c.shape.n_ctx));
    // Every source q head's kv head holds a copy of the source q head's kv head.
    const int32_t g_s = s.n_heads / s.n_kv_heads;
    const int32_t g_t = t.n_heads / t.n_kv_heads;
    for (int32_t h = 0; h < s.n_heads; ++h) {
        EXPECT_EQ(g->kv_source[static_cast<size_t>(g->q_head_of[static_cast<size_t>(h)] / g_t)], h / g_s) << h;
    }
    // Each rotated dim keeps its pair's RoPE frequency exponent -2p / rope_dims, exactly (the kernels compute it so).
    for (int32_t e = 0; e < s.rope_dims; ++e) {
        const int32_t d = g->head_dim_of[static_cast<size_t>(e)];
        EXPECT_EQ(d % 2, e % 2);
        EXPECT_EQ(-2.0 * (e / 2) / s.rope_dims, -2.0 * (d / 2) / t.rope_dims) << "source dim " << e;
    }
}

INSTANTIATE_TEST_SUITE_P(
    shapes, grow_layout_places,
    ::testing::Values(
        // 110M: 12 heads of 64 (8 x 8), one kv head per q head: each source kv head is copied for its two q heads.
        layout_case{{"110M", 768, 12, 12, 12, 2048, 1024},
                    {0, 1, 2, 3, 4, 5, 6, 7},
                    {0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1},
                    {0, 1, 16, 17, 32, 33, 48, 49},
                    {0, 2, 4, 7, 9}},
        // 1B: 32 heads of 64 in 4 groups of 8: the source's groups of 2 fill the first two q heads of each group.
        layout_case{{"1B", 2048, 22, 32, 4, 5632, 2048},
                    {0, 1, 8, 9, 16, 17, 24, 25},
                    {0, 1, 2, 3},
                    {0, 1, 16, 17, 32, 33, 48, 49},
                    {0, 4, 8, 13, 17}},
        // The same head size (16 heads of 8, MHA): dims stay, kv heads are copied.
        layout_case{{"same-head-size", 128, 8, 16, 16, 384, 256},
                    {0, 1, 2, 3, 4, 5, 6, 7},
                    {0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1},
                    {0, 1, 2, 3, 4, 5, 6, 7},
                    {0, 1, 3, 4, 6}},
        // Heads of 16 in groups of 4 (GQA 16/4 with dim 256): the source's kv heads map one to one.
        layout_case{{"gqa-wider-heads", 256, 7, 16, 4, 256, 512},
                    {0, 1, 4, 5, 8, 9, 12, 13},
                    {0, 1, 2, 3},
                    {0, 1, 4, 5, 8, 9, 12, 13},
                    {0, 1, 2, 4, 5}}),
    [](const auto& info) {
        std::string n(info.param.shape.name);
        for (char& ch : n) ch = ch == '-' ? '_' : ch;
        return n;
    });

struct refusal_case {
    synth_shape shape;
    std::vector<std::string> problems;
};

void PrintTo(const refusal_case& c, std::ostream* os) {
    *os << c.shape.name;
}

class grow_layout_refuses : public ::testing::TestWithParam<refusal_case> {};

TEST_P(grow_layout_refuses, a_shape_that_cannot_hold_the_source_with_every_reason_in_one_error) {
    const refusal_case& c = GetParam();
    auto g = plan_growth(stories_shape(), c.shape, "models/stories260K.gguf");
    ASSERT_FALSE(g.ok());
    const std::string& m = g.message();
    EXPECT_EQ(m.rfind("models/stories260K.gguf: cannot grow into shape " + std::string(c.shape.name), 0), 0u) << m;
    for (const auto& p : c.problems) EXPECT_NE(m.find(p), std::string::npos) << "missing '" << p << "' in: " << m;
}

INSTANTIATE_TEST_SUITE_P(
    shapes, grow_layout_refuses,
    ::testing::Values(
        refusal_case{{"tiny", 256, 2, 8, 4, 768, 512}, {"layers 2 < the source's 5"}},
        refusal_case{{"narrow", 32, 8, 4, 4, 128, 256},
                     {"dim 32 < the source's 64", "heads 4 < the source's 8", "FFN units 128 < the source's 172"}},
        refusal_case{{"heads-of-12", 192, 8, 16, 16, 384, 256}, {"head size 12 is not a multiple of the source's 8"}},
        refusal_case{{"two-kv-heads", 256, 8, 32, 2, 512, 256},
                     {"2 kv heads of 16 q heads each cannot hold the source's 4 kv heads"}}),
    [](const auto& info) {
        std::string n(info.param.shape.name);
        for (char& ch : n) ch = ch == '-' ? '_' : ch;
        return n;
    });

}  // namespace
}  // namespace troupe::cli
