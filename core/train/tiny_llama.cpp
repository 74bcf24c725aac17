#include "core/train/tiny_llama.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/train/activations.h"
#include "core/train/linear.h"
#include "core/train/rmsnorm.h"
#include "core/train/rope.h"

namespace troupe::train {
namespace {

rope_params rope_of(const llama_hparams& hp) {
    return rope_params{hp.head_dim, hp.rope_dims, hp.rope == rope_mode::neox, hp.rope_base, hp.rope_scale, nullptr};
}

void assign(param& p, const std::vector<float>& v) {
    std::copy(v.begin(), v.end(), p.value.begin());
}

}  // namespace

void tiny_llama::make_params() {
    const int64_t d = hp_.dim, qw = hp_.q_width(), kvw = hp_.kv_width(), ff = hp_.ffn_dim, nv = hp_.n_vocab;
    token_embd = param("token_embd.weight", {d, nv});
    output_norm = param("output_norm.weight", {d});
    output = param("output.weight", {d, nv});
    layers.clear();
    for (int32_t l = 0; l < hp_.n_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        layers.push_back(tiny_llama_layer{param(p + "attn_norm.weight", {d}), param(p + "attn_q.weight", {d, qw}),
                                          param(p + "attn_k.weight", {d, kvw}), param(p + "attn_v.weight", {d, kvw}),
                                          param(p + "attn_output.weight", {qw, d}), param(p + "ffn_norm.weight", {d}),
                                          param(p + "ffn_gate.weight", {d, ff}), param(p + "ffn_up.weight", {d, ff}),
                                          param(p + "ffn_down.weight", {ff, d})});
    }
}

tiny_llama::tiny_llama(const llama_hparams& hp, uint64_t seed) : hp_(hp) {
    make_params();
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> z(0.0f, 1.0f);
    const float resid = 1.0f / std::sqrt(2.0f * static_cast<float>(hp_.n_layers));
    auto fill = [&](param& p, float scale) {
        for (float& v : p.value) v = 0.02f * scale * z(rng);
    };
    fill(token_embd, 1.0f);
    fill(output, 1.0f);
    std::fill(output_norm.value.begin(), output_norm.value.end(), 1.0f);
    for (tiny_llama_layer& l : layers) {
        std::fill(l.attn_norm.value.begin(), l.attn_norm.value.end(), 1.0f);
        std::fill(l.ffn_norm.value.begin(), l.ffn_norm.value.end(), 1.0f);
        for (param* p : {&l.wq, &l.wk, &l.wv, &l.w_gate, &l.w_up}) fill(*p, 1.0f);
        fill(l.wo, resid);
        fill(l.w_down, resid);
    }
}

tiny_llama::tiny_llama(const float_llama& from) : hp_(from.hp) {
    make_params();
    assign(token_embd, from.token_embd);
    assign(output_norm, from.output_norm);
    assign(output, from.output);
    for (size_t l = 0; l < layers.size(); ++l) {
        const float_layer& s = from.layers[l];
        tiny_llama_layer& d = layers[l];
        assign(d.attn_norm, s.attn_norm);
        assign(d.wq, s.wq);
        assign(d.wk, s.wk);
        assign(d.wv, s.wv);
        assign(d.wo, s.wo);
        assign(d.ffn_norm, s.ffn_norm);
        assign(d.w_gate, s.w_gate);
        assign(d.w_up, s.w_up);
        assign(d.w_down, s.w_down);
    }
}

std::vector<param*> tiny_llama::params() {
    std::vector<param*> out{&token_embd, &output_norm, &output};
    for (tiny_llama_layer& l : layers) {
        for (param* p : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down}) {
            out.push_back(p);
        }
    }
    return out;
}

void tiny_llama::forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                         const std::vector<int64_t>& bounds, float* logits, cpu::thread_pool& pool) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t d = hp_.dim, qw = hp_.q_width(), kvw = hp_.kv_width(), ff = hp_.ffn_dim, nv = hp_.n_vocab;
    const rope_params rp = rope_of(hp_);
    const attention_shape as{hp_.n_heads, hp_.n_kv_heads, hp_.head_dim};
    cs_ = rope_table(positions.data(), n, rp);
    acts_.resize(layers.size());
    std::vector<float> x(n * d);  // [N, dim] the residual stream
    for (int64_t r = 0; r < n; ++r) {
        std::copy_n(token_embd.v() + static_cast<int64_t>(tokens[r]) * d, d, x.begin() + r * d);
    }
    for (size_t il = 0; il < layers.size(); ++il) {
        tiny_llama_layer& l = layers[il];
        layer_acts& s = acts_[il];
        s.x = x;
        s.r1.resize(n);
        s.n1.resize(n * d);
        rmsnorm_forward(s.x.data(), l.attn_norm.v(), s.n1.data(), s.r1.data(), n, d, hp_.rms_eps);
        s.q.resize(n * qw);
        s.k.resize(n * kvw);
        s.v.resize(n * kvw);
        linear_forward(s.n1.data(), l.wq.v(), nullptr, s.q.data(), n, d, qw, pool);
        linear_forward(s.n1.data(), l.wk.v(), nullptr, s.k.data(), n, d, kvw, pool);
        linear_forward(s.n1.data(), l.wv.v(), nullptr, s.v.data(), n, d, kvw, pool);
        rope_forward(s.q.data(), cs_.data(), n, hp_.n_heads, rp);
        rope_forward(s.k.data(), cs_.data(), n, hp_.n_kv_heads, rp);
        s.a.resize(n * qw);
        attention_forward(s.q.data(), s.k.data(), s.v.data(), s.a.data(), bounds, as, s.att, pool);
        s.x2.resize(n * d);
        linear_forward(s.a.data(), l.wo.v(), nullptr, s.x2.data(), n, qw, d, pool);
        for (int64_t i = 0; i < n * d; ++i) s.x2[i] += s.x[i];
        s.r2.resize(n);
        s.n2.resize(n * d);
        rmsnorm_forward(s.x2.data(), l.ffn_norm.v(), s.n2.data(), s.r2.data(), n, d, hp_.rms_eps);
        s.gate.resize(n * ff);
        s.up.resize(n * ff);
        s.mid.resize(n * ff);
        linear_forward(s.n2.data(), l.w_gate.v(), nullptr, s.gate.data(), n, d, ff, pool);
        linear_forward(s.n2.data(), l.w_up.v(), nullptr, s.up.data(), n, d, ff, pool);
        swiglu_forward(s.gate.data(), s.up.data(), s.mid.data(), n * ff);
        linear_forward(s.mid.data(), l.w_down.v(), nullptr, x.data(), n, ff, d, pool);
        for (int64_t i = 0; i < n * d; ++i) x[i] += s.x2[i];
    }
    x_out_ = std::move(x);
    r_out_.resize(n);
    f_.resize(n * d);
    rmsnorm_forward(x_out_.data(), output_norm.v(), f_.data(), r_out_.data(), n, d, hp_.rms_eps);
    linear_forward(f_.data(), output.v(), nullptr, logits, n, d, nv, pool);
}

void tiny_llama::backward(const std::vector<int32_t>& tokens, const std::vector<int64_t>& bounds, const float* dlogits,
                          cpu::thread_pool& pool) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t d = hp_.dim, qw = hp_.q_width(), kvw = hp_.kv_width(), ff = hp_.ffn_dim, nv = hp_.n_vocab;
    const rope_params rp = rope_of(hp_);
    const attention_shape as{hp_.n_heads, hp_.n_kv_heads, hp_.head_dim};
    std::vector<float> df(n * d, 0.0f), dx(n * d, 0.0f);  // [N, dim]
    linear_backward(f_.data(), output.v(), dlogits, df.data(), output.g(), nullptr, n, d, nv, pool);
    rmsnorm_backward(x_out_.data(), output_norm.v(), r_out_.data(), df.data(), dx.data(), output_norm.g(), n, d);
    for (size_t il = layers.size(); il-- > 0;) {
        tiny_llama_layer& l = layers[il];
        layer_acts& s = acts_[il];
        // x_out = x2 + W_down · mid: dx2 = dx + the FFN branch's gradient, accumulated into dx in place.
        std::vector<float> dmid(n * ff, 0.0f), dgate(n * ff, 0.0f), dup(n * ff, 0.0f), dn2(n * d, 0.0f);
        linear_backward(s.mid.data(), l.w_down.v(), dx.data(), dmid.data(), l.w_down.g(), nullptr, n, ff, d, pool);
        swiglu_backward(s.gate.data(), s.up.data(), dmid.data(), dgate.data(), dup.data(), n * ff);
        linear_backward(s.n2.data(), l.w_gate.v(), dgate.data(), dn2.data(), l.w_gate.g(), nullptr, n, d, ff, pool);
        linear_backward(s.n2.data(), l.w_up.v(), dup.data(), dn2.data(), l.w_up.g(), nullptr, n, d, ff, pool);
        rmsnorm_backward(s.x2.data(), l.ffn_norm.v(), s.r2.data(), dn2.data(), dx.data(), l.ffn_norm.g(), n, d);
        // x2 = x + W_o · a
        std::vector<float> da(n * qw, 0.0f), dq(n * qw, 0.0f), dk(n * kvw, 0.0f), dv(n * kvw, 0.0f);
        linear_backward(s.a.data(), l.wo.v(), dx.data(), da.data(), l.wo.g(), nullptr, n, qw, d, pool);
        attention_backward(s.q.data(), s.k.data(), s.v.data(), da.data(), bounds, as, s.att, dq.data(), dk.data(),
                           dv.data(), pool);
        std::vector<float> dq0(n * qw, 0.0f), dk0(n * kvw, 0.0f), dn1(n * d, 0.0f);
        rope_backward(dq.data(), cs_.data(), dq0.data(), n, hp_.n_heads, rp);
        rope_backward(dk.data(), cs_.data(), dk0.data(), n, hp_.n_kv_heads, rp);
        linear_backward(s.n1.data(), l.wq.v(), dq0.data(), dn1.data(), l.wq.g(), nullptr, n, d, qw, pool);
        linear_backward(s.n1.data(), l.wk.v(), dk0.data(), dn1.data(), l.wk.g(), nullptr, n, d, kvw, pool);
        linear_backward(s.n1.data(), l.wv.v(), dv.data(), dn1.data(), l.wv.g(), nullptr, n, d, kvw, pool);
        rmsnorm_backward(s.x.data(), l.attn_norm.v(), s.r1.data(), dn1.data(), dx.data(), l.attn_norm.g(), n, d);
    }
    for (int64_t r = 0; r < n; ++r) {
        float* g = token_embd.g() + static_cast<int64_t>(tokens[r]) * d;
        for (int64_t i = 0; i < d; ++i) g[i] += dx[r * d + i];
    }
}

}  // namespace troupe::train
