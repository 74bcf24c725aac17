// The whole drafters' backward against central finite differences, on a tiny random llama (dim 8, 2 heads sharing
// one KV head, vocab 11): Medusa heads, the EAGLE layer (both its losses' inputs: logits and features), and the
// small llama. Every parameter tensor is checked, with every weight random (no zero-initialised branch).
#include <gtest/gtest.h>

#include "core/train/eagle_layer.h"
#include "core/train/medusa_heads.h"
#include "core/train/tiny_llama.h"
#include "tests/train/gradient_check.h"

namespace troupe::train {
namespace {

using testing::dot;
using testing::expect_gradient;
using testing::random_values;

llama_hparams tiny_hparams(int32_t n_layers) {
    llama_hparams hp;
    hp.architecture = "llama";
    hp.n_vocab = 11;
    hp.n_ctx = 64;
    hp.dim = 8;
    hp.n_layers = n_layers;
    hp.n_heads = 2;
    hp.n_kv_heads = 1;
    hp.head_dim = 4;
    hp.ffn_dim = 12;
    hp.rope_dims = 4;
    return hp;
}

float_llama tiny_target(uint64_t seed) {
    float_llama m;
    m.hp = tiny_hparams(1);
    const int64_t d = 8, nv = 11, qw = 8, kvw = 4, ff = 12;
    m.token_embd = random_values(nv * d, seed);
    m.output_norm = random_values(d, seed + 1, 0.5f);
    for (float& v : m.output_norm) v += 1.0f;
    m.output = random_values(nv * d, seed + 2);
    float_layer l;
    l.attn_norm = std::vector<float>(d, 1.0f);
    l.wq = random_values(qw * d, seed + 3, 0.5f);
    l.wk = random_values(kvw * d, seed + 4, 0.5f);
    l.wv = random_values(kvw * d, seed + 5, 0.5f);
    l.wo = random_values(d * qw, seed + 6, 0.5f);
    l.ffn_norm = std::vector<float>(d, 1.0f);
    l.w_gate = random_values(ff * d, seed + 7, 0.5f);
    l.w_up = random_values(ff * d, seed + 8, 0.5f);
    l.w_down = random_values(d * ff, seed + 9, 0.5f);
    m.layers.push_back(l);
    return m;
}

void randomise(std::vector<param*> params, uint64_t seed, float scale) {
    for (param* p : params) {
        const bool norm = p->dims.size() == 1 && p->name.find("norm") != std::string::npos;
        p->value = random_values(p->size(), seed++, norm ? 0.3f : scale);
        if (norm) {
            for (float& v : p->value) v += 1.0f;
        }
    }
}

TEST(train_models, medusa_heads_backward_matches_central_differences) {
    cpu::thread_pool pool(2);
    const float_llama t = tiny_target(100);
    medusa_heads heads(2, 8, 11, t.output);
    randomise(heads.params(), 200, 0.5f);
    const int64_t b = 5;
    auto f = random_values(b * 8, 300, 2.0f);
    const auto r = random_values(b * 11, 301);
    for (int32_t h = 0; h < 2; ++h) {
        medusa_cache cache;
        std::vector<float> logits(b * 11), df(b * 8, 0.0f);
        auto loss = [&] {
            medusa_cache c;
            heads.forward(h, f.data(), b, logits.data(), c, pool);
            return dot(logits, r);
        };
        zero_grads(heads.params());
        heads.forward(h, f.data(), b, logits.data(), cache, pool);
        heads.backward(h, f.data(), b, r.data(), cache, df.data(), pool);
        expect_gradient("df", f, df, loss);
        for (param* p : {&heads.head(h).fc_w, &heads.head(h).fc_b, &heads.head(h).out_w}) {
            expect_gradient(p->name, p->value, p->grad, loss);
        }
    }
}

TEST(train_models, a_new_medusa_head_predicts_what_the_target_predicts) {
    cpu::thread_pool pool(1);
    const float_llama t = tiny_target(110);
    medusa_heads heads(3, 8, 11, t.output);
    const auto f = random_values(2 * 8, 111);
    std::vector<float> logits(2 * 11), expected(2 * 11);
    medusa_cache cache;
    heads.forward(2, f.data(), 2, logits.data(), cache, pool);
    for (int r = 0; r < 2; ++r) {
        for (int o = 0; o < 11; ++o) expected[r * 11 + o] = static_cast<float>(dot(&t.output[o * 8], &f[r * 8], 8));
    }
    for (int i = 0; i < 22; ++i) EXPECT_NEAR(logits[i], expected[i], 1e-5) << i;
}

eagle_batch tiny_eagle_batch() {
    eagle_batch b;
    b.bounds = {0, 3, 5};           // sequences of 3 and 2 rows
    b.tokens = {4, 7, 1, 10, 0};    // t_{j+1}
    b.positions = {0, 1, 2, 5, 6};  // the second sequence's window starts at position 5
    b.features = random_values(5 * 8, 400, 2.0f);
    return b;
}

TEST(train_models, eagle_layer_backward_matches_central_differences) {
    cpu::thread_pool pool(2);
    const float_llama t = tiny_target(120);
    eagle_layer layer(t);
    randomise(layer.params(), 500, 0.4f);
    const eagle_batch b = tiny_eagle_batch();
    const auto r_logits = random_values(5 * 11, 401), r_g = random_values(5 * 8, 402);
    std::vector<float> g(5 * 8), logits(5 * 11);
    auto loss = [&] {
        layer.forward(b, g.data(), logits.data(), pool);
        return dot(logits, r_logits) + dot(g, r_g);
    };
    zero_grads(layer.params());
    layer.forward(b, g.data(), logits.data(), pool);
    layer.backward(b, r_g.data(), r_logits.data(), pool);
    for (param* p : layer.params()) expect_gradient(p->name, p->value, p->grad, loss);
}

TEST(train_models, eagle_layer_backward_over_two_passes_matches_central_differences) {
    cpu::thread_pool pool(2);
    const float_llama t = tiny_target(140);
    eagle_layer layer(t);
    randomise(layer.params(), 600, 0.4f);
    eagle_batch b;
    b.passes = 2;
    b.bounds = {0, 6, 10};  // 2 passes of 3 rows, 2 passes of 2
    b.tokens = {4, 7, 1, 4, 7, 1, 10, 0, 10, 0};
    b.positions = {0, 1, 2, 0, 1, 2, 5, 6, 5, 6};
    b.features = random_values(10 * 8, 403, 2.0f);
    const auto r_logits = random_values(10 * 11, 404), r_g = random_values(10 * 8, 405);
    std::vector<float> g(10 * 8), logits(10 * 11);
    auto loss = [&] {
        layer.forward(b, g.data(), logits.data(), pool);
        return dot(logits, r_logits) + dot(g, r_g);
    };
    zero_grads(layer.params());
    layer.forward(b, g.data(), logits.data(), pool);
    layer.backward(b, r_g.data(), r_logits.data(), pool);
    for (param* p : layer.params()) expect_gradient(p->name, p->value, p->grad, loss);
}

// What training's second pass computes for a row is what drafting computes for a depth-2 row: the context rows
// before the chain, then one row fed the first row's output (the plugin's rows).
TEST(train_models, a_second_pass_row_computes_the_drafters_fed_back_row) {
    cpu::thread_pool pool(1);
    const float_llama t = tiny_target(150);
    eagle_layer layer(t);
    randomise(layer.params(), 700, 0.4f);
    eagle_batch one;
    one.bounds = {0, 4};
    one.tokens = {4, 7, 1, 9};
    one.positions = {0, 1, 2, 3};
    one.features = random_values(4 * 8, 406, 2.0f);
    std::vector<float> g1(4 * 8), l1(4 * 11);
    layer.forward(one, g1.data(), l1.data(), pool);
    eagle_batch two = one;  // pass 2: row i fed g1 of row i - 1
    two.passes = 2;
    two.bounds = {0, 8};
    two.tokens.insert(two.tokens.end(), one.tokens.begin(), one.tokens.end());
    two.positions.insert(two.positions.end(), one.positions.begin(), one.positions.end());
    two.features.insert(two.features.end(), one.features.begin(), one.features.begin() + 8);
    two.features.insert(two.features.end(), g1.begin(), g1.begin() + 3 * 8);
    std::vector<float> g2(8 * 8), l2(8 * 11);
    layer.forward(two, g2.data(), l2.data(), pool);
    for (int j = 0; j < 3; ++j) {  // the drafter: context rows 0 .. j, then (t_{j+2}, g1_j) at position j + 1
        eagle_batch chain;
        chain.bounds = {0, j + 2};
        chain.tokens.assign(one.tokens.begin(), one.tokens.begin() + j + 1);
        chain.tokens.push_back(one.tokens[j + 1]);
        for (int i = 0; i <= j + 1; ++i) chain.positions.push_back(i);
        chain.features.assign(one.features.begin(), one.features.begin() + (j + 1) * 8);
        chain.features.insert(chain.features.end(), g1.begin() + j * 8, g1.begin() + (j + 1) * 8);
        std::vector<float> gc((j + 2) * 8), lc((j + 2) * 11);
        layer.forward(chain, gc.data(), lc.data(), pool);
        for (int o = 0; o < 11; ++o) EXPECT_NEAR(l2[(4 + j + 1) * 11 + o], lc[(j + 1) * 11 + o], 1e-5) << j << " " << o;
    }
}

TEST(train_models, a_new_eagle_layer_passes_the_feature_through) {
    cpu::thread_pool pool(1);
    const float_llama t = tiny_target(130);
    eagle_layer layer(t);
    const eagle_batch b = tiny_eagle_batch();
    std::vector<float> g(5 * 8), logits(5 * 11);
    layer.forward(b, g.data(), logits.data(), pool);
    for (int i = 0; i < 5 * 8; ++i) EXPECT_NEAR(g[i], b.features[i], 1e-5) << i;
}

TEST(train_models, tiny_llama_backward_matches_central_differences) {
    cpu::thread_pool pool(2);
    tiny_llama m(tiny_hparams(2), 7);
    randomise(m.params(), 600, 0.4f);
    const std::vector<int32_t> tokens{1, 5, 9, 2, 2, 7, 0};
    const std::vector<int32_t> positions{0, 1, 2, 3, 0, 1, 2};
    const std::vector<int64_t> bounds{0, 4, 7};
    const auto r = random_values(7 * 11, 601);
    std::vector<float> logits(7 * 11);
    auto loss = [&] {
        m.forward(tokens, positions, bounds, logits.data(), pool);
        return dot(logits, r);
    };
    zero_grads(m.params());
    m.forward(tokens, positions, bounds, logits.data(), pool);
    m.backward(tokens, bounds, r.data(), pool);
    for (param* p : m.params()) expect_gradient(p->name, p->value, p->grad, loss, 16);
}

}  // namespace
}  // namespace troupe::train
