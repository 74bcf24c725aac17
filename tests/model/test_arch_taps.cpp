// Taps (core/model/tap_sink.h) on every dense architecture family (../shared/models/arch: qwen2, phi3, gemma2): a
// sink that wants them all sees each layer's eight taps and the two output ones in graph order with the widths of
// the architecture, q/k/v as the attention op receives them (qwen2: with its biases; phi3: the rows of its fused
// attn_qkv), the FFN hidden rows as the architecture's gate makes them (gemma2: GeGLU), and the logits tap equals
// forward()'s logits (gemma2: after the final soft-capping). Values are recomputed here from the file's weights in
// double precision, in the float activation recipe (the golden tests cover the quantized one).
#include <gtest/gtest.h>

#include <cmath>

#include "core/gguf/gguf_file.h"
#include "core/loader/model_loader.h"
#include "core/model/cpu_llama.h"
#include "kernels/ref/quants.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"

namespace troupe {
namespace {

struct recorded {
    tap_point tap;
    int32_t layer;
    int64_t n_rows, width;
    std::vector<float> data;
};

class recording_sink final : public tap_sink {
public:
    uint64_t wanted() const override { return all_taps; }
    status observe(const tap_data& d) override {
        seen.push_back({d.tap, d.layer, d.n_rows, d.width, std::vector<float>(d.data, d.data + d.n_rows * d.width)});
        return {};
    }
    std::vector<recorded> seen;
};

// Rows [r0, r1) of a tensor, dequantized: [r1 - r0, n_in].
std::vector<float> rows_of(const gguf::gguf_file& f, const std::string& name, int64_t r0, int64_t r1) {
    const gguf::tensor_info* t = f.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    const int64_t n_in = t->dims[0];
    const size_t rb = row_bytes(t->type, n_in);
    std::vector<float> out(static_cast<size_t>((r1 - r0) * n_in));
    for (int64_t r = r0; r < r1; ++r) {
        ref::dequantize_row(t->type, static_cast<const uint8_t*>(t->data) + r * rb, out.data() + (r - r0) * n_in, n_in);
    }
    return out;
}

std::vector<double> matvec(const std::vector<float>& w, const float* x, int64_t n_in) {
    std::vector<double> y(w.size() / n_in);
    for (size_t o = 0; o < y.size(); ++o) {
        for (int64_t i = 0; i < n_in; ++i) y[o] += static_cast<double>(w[o * n_in + i]) * x[i];
    }
    return y;
}

void expect_rows_near(const float* got, const std::vector<double>& want, double tol, const std::string& what) {
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    EXPECT_LT(worst, tol) << what;
}

// One forward over a 3-token prompt with every tap wanted; checks the sequence and widths, returns the sink.
std::shared_ptr<recording_sink> run_with_taps(loaded_model& m, forward_output& out) {
    auto sink = std::make_shared<recording_sink>();
    m.cpu->attach_taps(sink);
    forward_batch b;
    const int32_t bs = m.runner->kv().block_size;
    b.seqs.push_back(sequence_step{3, {1, 403, 407}, 0, {0}});
    EXPECT_GE(bs, 3);
    EXPECT_TRUE(m.runner->forward(b, out).ok());
    const llama_hparams& hp = m.cpu->hparams();
    const tap_point per_layer[] = {tap_point::attn_norm,  tap_point::q,        tap_point::k,
                                   tap_point::v,          tap_point::attn_out, tap_point::ffn_norm,
                                   tap_point::ffn_hidden, tap_point::layer_out};
    const int64_t widths[] = {hp.dim,       hp.q_width(), hp.kv_width(), hp.kv_width(),
                              hp.q_width(), hp.dim,       hp.ffn_dim,    hp.dim};
    EXPECT_EQ(sink->seen.size(), static_cast<size_t>(8 * hp.n_layers + 2));
    if (sink->seen.size() != static_cast<size_t>(8 * hp.n_layers + 2)) return sink;
    for (int32_t l = 0; l < hp.n_layers; ++l) {
        for (int i = 0; i < 8; ++i) {
            const recorded& r = sink->seen[static_cast<size_t>(l) * 8 + i];
            EXPECT_EQ(r.tap, per_layer[i]);
            EXPECT_EQ(r.layer, l);
            EXPECT_EQ(r.n_rows, 3);
            EXPECT_EQ(r.width, widths[i]) << tap_name(per_layer[i]) << " of layer " << l;
        }
    }
    EXPECT_EQ(sink->seen.back().tap, tap_point::logits);
    EXPECT_EQ(sink->seen.back().data, out.logits);
    return sink;
}

result<loaded_model> load(const std::string& path) {
    return load_model(testing::golden_config(path, testing::golden_setup::builtin_float));
}

TEST(arch_taps, qwen2s_q_k_v_taps_carry_its_biases) {
    TROUPE_REQUIRE_SHARED(path, "models/arch/tiny-qwen2.gguf");
    auto m = load(path);
    ASSERT_TRUE(m.ok()) << m.message();
    forward_output out;
    auto sink = run_with_taps(*m, out);
    const gguf::gguf_file& f = *m->file;
    const llama_hparams& hp = m->cpu->hparams();
    for (int32_t l : {0, 1}) {
        const std::string p = "blk." + std::to_string(l) + ".";
        const float* h = sink->seen[l * 8].data.data();  // attn_norm, token 0
        const char* names[] = {"attn_q", "attn_k", "attn_v"};
        for (int i = 0; i < 3; ++i) {
            const int64_t n_out = i == 0 ? hp.q_width() : hp.kv_width();
            std::vector<double> want = matvec(rows_of(f, p + names[i] + ".weight", 0, n_out), h, hp.dim);
            const std::vector<float> bias = rows_of(f, p + names[i] + ".bias", 0, 1);
            for (int64_t o = 0; o < n_out; ++o) want[o] += bias[o];
            expect_rows_near(sink->seen[l * 8 + 1 + i].data.data(), want, 2e-3, p + names[i]);
        }
    }
}

TEST(arch_taps, phi3s_q_k_v_taps_are_the_rows_of_its_fused_qkv_and_its_hidden_rows_the_fused_gate_up) {
    TROUPE_REQUIRE_SHARED(path, "models/arch/tiny-phi3.gguf");
    auto m = load(path);
    ASSERT_TRUE(m.ok()) << m.message();
    forward_output out;
    auto sink = run_with_taps(*m, out);
    const gguf::gguf_file& f = *m->file;
    const llama_hparams& hp = m->cpu->hparams();
    const float* h = sink->seen[8].data.data();  // layer 1's attn_norm, token 0
    const int64_t q = hp.q_width(), kv = hp.kv_width();
    const int64_t bounds[] = {0, q, q + kv, q + 2 * kv};
    for (int i = 0; i < 3; ++i) {
        const auto want = matvec(rows_of(f, "blk.1.attn_qkv.weight", bounds[i], bounds[i + 1]), h, hp.dim);
        expect_rows_near(sink->seen[8 + 1 + i].data.data(), want, 2e-3, "part " + std::to_string(i) + " of attn_qkv");
    }
    const float* hf = sink->seen[8 + 5].data.data();  // layer 1's ffn_norm
    const auto gate = matvec(rows_of(f, "blk.1.ffn_up.weight", 0, hp.ffn_dim), hf, hp.dim);
    const auto up = matvec(rows_of(f, "blk.1.ffn_up.weight", hp.ffn_dim, 2 * hp.ffn_dim), hf, hp.dim);
    std::vector<double> want(hp.ffn_dim);
    for (int64_t i = 0; i < hp.ffn_dim; ++i) want[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    expect_rows_near(sink->seen[8 + 6].data.data(), want, 2e-3, "ffn_hidden (SwiGLU of the fused gate/up)");
}

TEST(arch_taps, gemma2s_hidden_rows_are_geglu_and_its_logits_tap_is_soft_capped) {
    TROUPE_REQUIRE_SHARED(path, "models/arch/tiny-gemma2.gguf");
    auto m = load(path);
    ASSERT_TRUE(m.ok()) << m.message();
    forward_output out;
    auto sink = run_with_taps(*m, out);
    const gguf::gguf_file& f = *m->file;
    const llama_hparams& hp = m->cpu->hparams();
    const float* hf = sink->seen[5].data.data();  // layer 0's ffn_norm, token 0
    const auto gate = matvec(rows_of(f, "blk.0.ffn_gate.weight", 0, hp.ffn_dim), hf, hp.dim);
    const auto up = matvec(rows_of(f, "blk.0.ffn_up.weight", 0, hp.ffn_dim), hf, hp.dim);
    std::vector<double> want(hp.ffn_dim);
    for (int64_t i = 0; i < hp.ffn_dim; ++i) {
        const double x = gate[i];
        want[i] = 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * up[i];
    }
    // The gate is rounded to F16 before GELU (as the reference and llama.cpp): 2^-11 relative.
    expect_rows_near(sink->seen[6].data.data(), want, 5e-3, "ffn_hidden (GeGLU)");
    // Logits from the output_norm tap through the tied output (the embeddings), then 30 tanh(x / 30).
    const float* normed = sink->seen[sink->seen.size() - 2].data.data();
    const auto raw = matvec(rows_of(f, "token_embd.weight", 0, 16), normed, hp.dim);
    std::vector<double> capped(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) capped[i] = hp.final_softcap * std::tanh(raw[i] / hp.final_softcap);
    ASSERT_EQ(hp.final_softcap, 30.0f);
    expect_rows_near(out.logits.data(), capped, 2e-3, "logits 0..15 (soft-capped)");
}

}  // namespace
}  // namespace troupe
