// Taps of cpu_llama (core/model/tap_sink.h) on stories260K: a recording sink sees every tap it wants, in graph
// order, with the step's rows, sequence ids and positions; the values equal an independent recomputation from the
// file's weights (attn_norm, ffn_hidden, output_norm) and forward()'s logits; fused (steps of <= 16 tokens, one
// token in place) and separate products hand the taps the same values.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>

#include "core/gguf/gguf_file.h"
#include "core/loader/model_loader.h"
#include "core/model/cpu_llama.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"

namespace troupe {
namespace {

struct recorded_tap {
    tap_point tap;
    int32_t layer;
    int64_t n_rows, width;
    std::vector<float> data;
    std::vector<int64_t> seq_ids;
    std::vector<int32_t> positions;
};

class recording_sink final : public tap_sink {
public:
    explicit recording_sink(uint64_t wanted) : wanted_(wanted) {}
    uint64_t wanted() const override { return wanted_; }
    status observe(const tap_data& d) override {
        seen.push_back({d.tap, d.layer, d.n_rows, d.width, std::vector<float>(d.data, d.data + d.n_rows * d.width),
                        std::vector<int64_t>(d.seq_ids, d.seq_ids + d.n_rows),
                        std::vector<int32_t>(d.positions, d.positions + d.n_rows)});
        if (fail_at == static_cast<int>(seen.size()))
            return make_error("recording_sink: refused tap " + std::to_string(fail_at));
        return {};
    }
    std::vector<recorded_tap> seen;
    int fail_at = -1;

private:
    uint64_t wanted_;
};

result<loaded_model> load(const std::string& path, int32_t max_seqs = 4) {
    engine_config c = testing::golden_config(path, testing::golden_setup::builtin_float);
    c.scheduler.max_running_seqs = max_seqs;
    return load_model(c);
}

std::vector<int32_t> table_for(const model_runner& r, int32_t seq, int32_t n_tokens) {
    const int32_t bs = r.kv().block_size, per = (n_tokens + bs - 1) / bs;
    std::vector<int32_t> t;
    for (int32_t b = 0; b < per; ++b) t.push_back(seq * per + b);
    return t;
}

std::vector<int32_t> prompt(int32_t n, int32_t salt, int32_t n_vocab) {
    std::vector<int32_t> p;
    for (int32_t i = 0; i < n; ++i) p.push_back(1 + (salt * 31 + i * 17) % (n_vocab - 1));
    return p;
}

const float* f32_tensor(const gguf::gguf_file& f, const std::string& name) {
    const gguf::tensor_info* t = f.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    EXPECT_EQ(t->type, ggml_type::f32) << name;
    return reinterpret_cast<const float*>(t->data);
}

// y[n_out] = W[n_out, n_in] · x
std::vector<float> matvec(const float* w, const float* x, int64_t n_out, int64_t n_in) {
    std::vector<float> y(n_out);
    for (int64_t o = 0; o < n_out; ++o) {
        double s = 0;
        for (int64_t i = 0; i < n_in; ++i) s += static_cast<double>(w[o * n_in + i]) * x[i];
        y[o] = static_cast<float>(s);
    }
    return y;
}

std::vector<float> rmsnorm(const float* x, const float* w, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const double inv = 1.0 / std::sqrt(ss / n + eps);
    std::vector<float> y(n);
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * inv * w[i]);
    return y;
}

void expect_near_rows(const float* got, const std::vector<float>& want, float tol, const std::string& what) {
    float worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    EXPECT_LT(worst, tol) << what;
}

TEST(taps, every_tap_arrives_in_graph_order_with_the_rows_sequences_and_positions_of_the_step) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto m = load(path);
    ASSERT_TRUE(m.ok()) << m.message();
    auto sink = std::make_shared<recording_sink>(all_taps);
    m->cpu->attach_taps(sink);
    const llama_hparams& hp = m->cpu->hparams();
    model_runner& r = *m->runner;
    // Sequence 7 brings 3 tokens at positions 0..2, sequence 9 brings 2 at 0..1 with logits for both.
    forward_batch b;
    b.seqs.push_back(sequence_step{7, prompt(3, 1, hp.n_vocab), 0, table_for(r, 0, 8)});
    b.seqs.push_back(sequence_step{9, prompt(2, 2, hp.n_vocab), 0, table_for(r, 1, 8), /*all_logits=*/true});
    forward_output out;
    ASSERT_TRUE(r.forward(b, out).ok());

    const tap_point per_layer[] = {tap_point::attn_norm,  tap_point::q,        tap_point::k,
                                   tap_point::v,          tap_point::attn_out, tap_point::ffn_norm,
                                   tap_point::ffn_hidden, tap_point::layer_out};
    const std::map<tap_point, int64_t> width = {{tap_point::attn_norm, hp.dim},      {tap_point::q, hp.q_width()},
                                                {tap_point::k, hp.kv_width()},       {tap_point::v, hp.kv_width()},
                                                {tap_point::attn_out, hp.q_width()}, {tap_point::ffn_norm, hp.dim},
                                                {tap_point::ffn_hidden, hp.ffn_dim}, {tap_point::layer_out, hp.dim},
                                                {tap_point::output_norm, hp.dim},    {tap_point::logits, hp.n_vocab}};
    ASSERT_EQ(sink->seen.size(), static_cast<size_t>(8 * hp.n_layers + 2));
    size_t i = 0;
    for (int32_t l = 0; l < hp.n_layers; ++l) {
        for (tap_point t : per_layer) {
            const recorded_tap& s = sink->seen[i++];
            SCOPED_TRACE(std::string(tap_name(t)) + " of layer " + std::to_string(l));
            EXPECT_EQ(s.tap, t);
            EXPECT_EQ(s.layer, l);
            EXPECT_EQ(s.n_rows, 5);
            EXPECT_EQ(s.width, width.at(t));
            EXPECT_EQ(s.seq_ids, (std::vector<int64_t>{7, 7, 7, 9, 9}));
            EXPECT_EQ(s.positions, (std::vector<int32_t>{0, 1, 2, 0, 1}));
        }
    }
    for (tap_point t : {tap_point::output_norm, tap_point::logits}) {  // sequence 7's last row, both of 9's
        const recorded_tap& s = sink->seen[i++];
        SCOPED_TRACE(tap_name(t));
        EXPECT_EQ(s.tap, t);
        EXPECT_EQ(s.layer, -1);
        EXPECT_EQ(s.n_rows, 3);
        EXPECT_EQ(s.width, width.at(t));
        EXPECT_EQ(s.seq_ids, (std::vector<int64_t>{7, 9, 9}));
        EXPECT_EQ(s.positions, (std::vector<int32_t>{2, 0, 1}));
    }
    // The logits tap is forward()'s logits, exactly.
    EXPECT_EQ(sink->seen.back().data, out.logits);
}

TEST(taps, tap_values_equal_an_independent_recomputation_from_the_file_weights) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto m = load(path);
    ASSERT_TRUE(m.ok()) << m.message();
    auto sink = std::make_shared<recording_sink>(tap_bit(tap_point::attn_norm) | tap_bit(tap_point::ffn_norm) |
                                                 tap_bit(tap_point::ffn_hidden) | tap_bit(tap_point::layer_out) |
                                                 tap_bit(tap_point::output_norm) | tap_bit(tap_point::logits));
    m->cpu->attach_taps(sink);
    const llama_hparams& hp = m->cpu->hparams();
    const gguf::gguf_file& f = *m->file;
    const std::vector<int32_t> tokens = prompt(4, 3, hp.n_vocab);
    forward_output out;
    ASSERT_TRUE(
        m->runner->forward(forward_batch{{sequence_step{0, tokens, 0, table_for(*m->runner, 0, 8)}}}, out).ok());
    ASSERT_EQ(sink->seen.size(), static_cast<size_t>(4 * hp.n_layers + 2));

    const float* embd = f32_tensor(f, "token_embd.weight");
    for (int32_t l = 0; l < hp.n_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        const recorded_tap& attn_norm = sink->seen[4 * l];
        const recorded_tap& ffn_norm = sink->seen[4 * l + 1];
        const recorded_tap& hidden = sink->seen[4 * l + 2];
        ASSERT_EQ(hidden.tap, tap_point::ffn_hidden);
        const float* w_gate = f32_tensor(f, p + "ffn_gate.weight");
        const float* w_up = f32_tensor(f, p + "ffn_up.weight");
        for (int64_t t = 0; t < 4; ++t) {
            SCOPED_TRACE("layer " + std::to_string(l) + ", token " + std::to_string(t));
            // attn_norm = rmsnorm(the residual stream entering the layer) · attn_norm.weight
            const float* x = l == 0 ? embd + tokens[t] * hp.dim : sink->seen[4 * (l - 1) + 3].data.data() + t * hp.dim;
            expect_near_rows(attn_norm.data.data() + t * hp.dim,
                             rmsnorm(x, f32_tensor(f, p + "attn_norm.weight"), hp.dim, hp.rms_eps), 1e-4f, "attn_norm");
            // ffn_hidden = silu(ffn_norm · W_gateᵀ) ⊙ ffn_norm · W_upᵀ
            const float* h = ffn_norm.data.data() + t * hp.dim;
            const std::vector<float> g = matvec(w_gate, h, hp.ffn_dim, hp.dim), u = matvec(w_up, h, hp.ffn_dim, hp.dim);
            std::vector<float> want(hp.ffn_dim);
            for (int32_t j = 0; j < hp.ffn_dim; ++j) want[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
            expect_near_rows(hidden.data.data() + t * hp.ffn_dim, want, 1e-4f, "ffn_hidden");
        }
    }
    // output_norm: the last token's final hidden state normed; logits: it times the output matrix, and forward's.
    const recorded_tap& on = sink->seen[4 * hp.n_layers];
    const recorded_tap& lg = sink->seen[4 * hp.n_layers + 1];
    ASSERT_EQ(on.n_rows, 1);
    const float* last = sink->seen[4 * (hp.n_layers - 1) + 3].data.data() + 3 * hp.dim;
    expect_near_rows(on.data.data(), rmsnorm(last, f32_tensor(f, "output_norm.weight"), hp.dim, hp.rms_eps), 1e-4f,
                     "output_norm");
    const gguf::tensor_info* out_w = f.find_tensor("output.weight");
    const float* w_out = out_w ? reinterpret_cast<const float*>(out_w->data) : embd;
    expect_near_rows(lg.data.data(), matvec(w_out, on.data.data(), hp.n_vocab, hp.dim), 1e-3f, "logits");
    EXPECT_EQ(lg.data, out.logits);
}

TEST(taps, fused_and_separate_products_hand_the_taps_the_same_values) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto m = load(path);
    ASSERT_TRUE(m.ok()) << m.message();
    ASSERT_GT(m->cpu->n_fused_groups(), 0);
    model_runner& r = *m->runner;
    const llama_hparams& hp = m->cpu->hparams();
    const int32_t n = 20;  // > k_max_fused_tokens: separate products
    ASSERT_GT(static_cast<size_t>(n), cpu_llama::k_max_fused_tokens);
    const std::vector<int32_t> tokens = prompt(n, 5, hp.n_vocab);
    const std::vector<int32_t> table = table_for(r, 0, n);
    forward_output out;

    auto whole =
        std::make_shared<recording_sink>(all_taps & ~tap_bit(tap_point::output_norm) & ~tap_bit(tap_point::logits));
    m->cpu->attach_taps(whole);
    ASSERT_TRUE(r.forward(forward_batch{{sequence_step{0, tokens, 0, table}}}, out).ok());
    // The same tokens in steps of 1 (fused, outputs in place), 4 and 15 (fused, outputs copied apart).
    auto pieces = std::make_shared<recording_sink>(whole->wanted());
    m->cpu->attach_taps(pieces);
    int32_t pos = 0;
    for (int32_t len : {1, 4, 15}) {
        const std::vector<int32_t> part(tokens.begin() + pos, tokens.begin() + pos + len);
        ASSERT_TRUE(r.forward(forward_batch{{sequence_step{0, part, pos, table}}}, out).ok());
        pos += len;
    }
    ASSERT_EQ(pos, n);
    // (tap, layer, position) -> row, from the pieces.
    std::map<std::tuple<tap_point, int32_t, int32_t>, const float*> rows;
    for (const recorded_tap& s : pieces->seen) {
        for (int64_t i = 0; i < s.n_rows; ++i) rows[{s.tap, s.layer, s.positions[i]}] = s.data.data() + i * s.width;
    }
    ASSERT_EQ(whole->seen.size(), static_cast<size_t>(8 * hp.n_layers));
    for (const recorded_tap& s : whole->seen) {
        for (int64_t i = 0; i < s.n_rows; ++i) {
            const auto it = rows.find({s.tap, s.layer, s.positions[i]});
            ASSERT_NE(it, rows.end());
            float worst = 0;
            for (int64_t j = 0; j < s.width; ++j)
                worst = std::max(worst, std::fabs(it->second[j] - s.data[i * s.width + j]));
            // GEMM tiles of several tokens may sum in another order than one token: float rounding only.
            EXPECT_LT(worst, 1e-4f) << tap_name(s.tap) << " of layer " << s.layer << " at position " << s.positions[i];
        }
    }
}

TEST(taps, a_refused_observation_fails_the_step_with_its_message_and_detaching_stops_the_calls) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto m = load(path);
    ASSERT_TRUE(m.ok()) << m.message();
    auto sink = std::make_shared<recording_sink>(tap_bit(tap_point::ffn_hidden));
    sink->fail_at = 2;  // layer 1's ffn_hidden
    m->cpu->attach_taps(sink);
    forward_output out;
    const std::vector<int32_t> table = table_for(*m->runner, 0, 8);
    const status st = m->runner->forward(forward_batch{{sequence_step{0, {1, 2}, 0, table}}}, out);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.message(), "recording_sink: refused tap 2");
    EXPECT_EQ(sink->seen.size(), 2u);
    m->cpu->attach_taps(nullptr);
    EXPECT_TRUE(m->runner->forward(forward_batch{{sequence_step{0, {1, 2}, 0, table}}}, out).ok());
    EXPECT_EQ(sink->seen.size(), 2u);
}

}  // namespace
}  // namespace troupe
