#include "core/model/mla_block.h"

#include <cmath>

#include "core/model/cpu_ops.h"

namespace troupe {
namespace {

// RoPE on adjacent pairs (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos) of x[rope_dim] with rotations cs.
void rotate(float* x, const float* cs, int32_t rope_dim) {
    for (int32_t i = 0; i < rope_dim / 2; ++i) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s;
        x[2 * i + 1] = x0 * s + x1 * c;
    }
}

}  // namespace

void mla_workspace::begin_step(const mla_params& p, const int32_t* positions, size_t n) {
    const int32_t pairs = p.rope_dim / 2;
    rope_cs.resize(n * static_cast<size_t>(p.rope_dim));
    for (size_t t = 0; t < n; ++t) {
        for (int32_t i = 0; i < pairs; ++i) {
            const float theta = p.rope_angle(positions[t], i);
            rope_cs[(t * pairs + i) * 2] = std::cos(theta);
            rope_cs[(t * pairs + i) * 2 + 1] = std::sin(theta);
        }
    }
}

result<mla_block> mla_block::make(const mla_params& p, const mla_layer_weights& w, int32_t layer,
                                  const std::string& name, const make_linear_fn& make_linear,
                                  std::shared_ptr<mla_workspace> workspace) {
    mla_block b;
    b.p_ = p;
    b.layer_ = layer;
    b.ws_ = workspace ? std::move(workspace) : std::make_shared<mla_workspace>();
    if (p.q_lora_rank > 0) {
        if (status st = make_linear(w.wq_a, name + "attn_q_a.weight", b.wq_a_); !st.ok()) return st.err();
        if (status st = make_linear(w.wq_b, name + "attn_q_b.weight", b.wq_b_); !st.ok()) return st.err();
        b.q_a_norm_ = static_cast<const float*>(w.q_a_norm.data);
    } else {
        if (status st = make_linear(w.wq, name + "attn_q.weight", b.wq_); !st.ok()) return st.err();
    }
    if (status st = make_linear(w.wkv_a, name + "attn_kv_a_mqa.weight", b.wkv_a_); !st.ok()) return st.err();
    b.kv_a_norm_ = static_cast<const float*>(w.kv_a_norm.data);
    return b;
}

status mla_block::forward(const float* x, size_t n, attention_call step, attention_op& op, const compute_context& ctx,
                          float* out) {
    mla_workspace& ws = *ws_;
    const int32_t hd = p_.head_dim(), lw = p_.latent_width(), rank = p_.kv_lora_rank;
    TROUPE_ASSERT(ws.rope_cs.size() >= n * static_cast<size_t>(p_.rope_dim),
                  "mla_block::forward before mla_workspace::begin_step for the step");
    if (ws.q.size() < n * p_.q_width()) ws.q.resize(n * p_.q_width());
    if (ws.latent.size() < n * lw) ws.latent.resize(n * lw);
    float* q = ws.q.data();
    float* kv = ws.latent.data();
    if (p_.q_lora_rank > 0) {
        if (ws.q_a.size() < n * p_.q_lora_rank) ws.q_a.resize(n * p_.q_lora_rank);
        if (status st = wq_a_.forward(x, ws.q_a.data(), static_cast<int64_t>(n), ctx); !st.ok()) return st;
        rmsnorm_rows(ws.q_a.data(), q_a_norm_, ws.q_a.data(), n, p_.q_lora_rank, p_.rms_eps);
        if (status st = wq_b_.forward(ws.q_a.data(), q, static_cast<int64_t>(n), ctx); !st.ok()) return st;
    } else {
        if (status st = wq_.forward(x, q, static_cast<int64_t>(n), ctx); !st.ok()) return st;
    }
    if (status st = wkv_a_.forward(x, kv, static_cast<int64_t>(n), ctx); !st.ok()) return st;
    const size_t pairs = static_cast<size_t>(p_.rope_dim / 2);
    for (size_t t = 0; t < n; ++t) {
        float* row = kv + t * lw;
        rmsnorm_rows(row, kv_a_norm_, row, 1, rank, p_.rms_eps);
        const float* cs = ws.rope_cs.data() + t * pairs * 2;
        rotate(row + rank, cs, p_.rope_dim);
        for (int32_t h = 0; h < p_.n_heads; ++h) rotate(q + (t * p_.n_heads + h) * hd + p_.qk_nope, cs, p_.rope_dim);
    }
    step.n_tokens = static_cast<int32_t>(n);
    step.n_heads = p_.n_heads;
    step.n_kv_heads = 1;
    step.head_dim = hd;
    step.scale = p_.attention_scale();
    step.q = q;
    step.k = kv;
    step.v = nullptr;
    step.v_pool = nullptr;
    step.out = out;
    step.layer = layer_;
    step.kv_lora_rank = rank;
    step.rope_dim = p_.rope_dim;
    step.v_head_dim = p_.v_dim;
    return op.forward(step, ctx.parallel_for);
}

std::vector<linear*> mla_block::weights_in_step_order() {
    if (p_.q_lora_rank > 0) return {&wq_a_, &wq_b_, &wkv_a_};
    return {&wq_, &wkv_a_};
}

size_t mla_block::weight_bytes() const {
    size_t bytes = wkv_a_.n_bytes() + static_cast<size_t>(p_.kv_lora_rank) * sizeof(float);
    if (p_.q_lora_rank > 0) return bytes + wq_a_.n_bytes() + wq_b_.n_bytes() + p_.q_lora_rank * sizeof(float);
    return bytes + wq_.n_bytes();
}

int64_t mla_block::macs_per_token() const {
    int64_t macs = wkv_a_.n_in() * wkv_a_.n_out();
    if (p_.q_lora_rank > 0) return macs + wq_a_.n_in() * wq_a_.n_out() + wq_b_.n_in() * wq_b_.n_out();
    return macs + wq_.n_in() * wq_.n_out();
}

kv_layout mla_kv_layout(const mla_params& p, kv_dtype type) {
    kv_layout l;
    l.name = std::string(type == kv_dtype::f16 ? "f16" : "f32") + " MLA latent";
    l.bytes_per_token = static_cast<size_t>(p.latent_width()) * kv_element_bytes(type);
    return l;
}

}  // namespace troupe
