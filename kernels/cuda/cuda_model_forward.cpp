// The whole Llama forward of one step on the device, lane 0 (cuda_model.h): the batch's indices checked on the
// host and uploaded at once, the layers, the taps reported where the description asks for them, the logits.
#include "kernels/cuda/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_mla.h"
#include "kernels/cuda/cuda_moe.h"
#include "kernels/cuda/cuda_scratch_layout.h"

namespace troupe::cuda {
namespace {

// Every index the kernels will follow, checked on the host: a bad batch fails the step, never the device.
const char* check_batch(const troupe_cuda_model& m, const troupe_cuda_batch& b) {
    if (b.struct_size != sizeof(troupe_cuda_batch) && b.struct_size != TROUPE_CUDA_BATCH_V2_SIZE)
        return fail("batch description of %u bytes, this library takes %zu (or %zu without trees)", b.struct_size,
                    sizeof(troupe_cuda_batch), TROUPE_CUDA_BATCH_V2_SIZE);
    if (b.n_tokens < 0 || b.n_seqs < 0 || b.n_out_rows < 0)
        return fail("negative sizes in the batch (%d tokens, %d sequences, %d rows)", b.n_tokens, b.n_seqs,
                    b.n_out_rows);
    if (b.n_out_rows > b.n_tokens) return fail("%d logits rows asked of %d tokens", b.n_out_rows, b.n_tokens);
    if (b.block_table_offsets[0] != 0) return fail("block_table_offsets[0] is %d, not 0", b.block_table_offsets[0]);
    for (int32_t s = 0; s < b.n_seqs; ++s) {
        if (b.block_table_offsets[s + 1] < b.block_table_offsets[s])
            return fail("block_table_offsets decrease at sequence %d", s);
    }
    for (int32_t i = 0; i < b.block_table_offsets[b.n_seqs]; ++i) {
        if (b.block_tables[i] < 0 || b.block_tables[i] >= m.n_blocks)
            return fail("block id %d outside the pool of %d blocks", b.block_tables[i], m.n_blocks);
    }
    for (int32_t t = 0; t < b.n_tokens; ++t) {
        if (b.tokens[t] < 0 || b.tokens[t] >= m.hp.n_vocab)
            return fail("token %d at batch index %d is outside the vocabulary of %d", b.tokens[t], t, m.hp.n_vocab);
        const int32_t s = b.seq_of[t];
        if (s < 0 || s >= b.n_seqs) return fail("token %d belongs to sequence %d of %d", t, s, b.n_seqs);
        const int64_t covered =
            static_cast<int64_t>(b.block_table_offsets[s + 1] - b.block_table_offsets[s]) * m.hp.block_size;
        if (b.positions[t] < 0 || b.positions[t] >= covered)
            return fail("token %d at position %d: its block table covers %lld positions", t, b.positions[t],
                        static_cast<long long>(covered));
    }
    for (int32_t r = 0; r < b.n_out_rows; ++r) {
        if (b.out_tokens[r] < 0 || b.out_tokens[r] >= b.n_tokens)
            return fail("logits row %d asks for token %d of %d", r, b.out_tokens[r], b.n_tokens);
    }
    if (b.struct_size == sizeof(troupe_cuda_batch) && b.rows != nullptr) {
        const tree_call tree{b.rows, b.mask_base, b.mask, b.mask_words};
        TROUPE_CUDA_TRY_STATUS(check_tree_call(tree, b.n_tokens, b.seq_of, b.block_table_offsets, m.hp.block_size));
    }
    return nullptr;
}

// Reports one tap to the host where the description asks for it (revision 6).
const char* report_tap(troupe_cuda_model& m, int32_t tap, int32_t layer, const float* rows, int64_t n_rows,
                       int64_t width, const int32_t* host_rows, cudaStream_t stream) {
    const uint64_t bit = uint64_t{1} << tap;
    if ((m.hp.tap_wanted & bit) == 0 || n_rows == 0) return nullptr;
    troupe_cuda_tap t{};
    t.struct_size = sizeof t;
    t.tap = tap;
    t.layer = layer;
    t.n_rows = n_rows;
    t.width = width;
    t.device_data = rows;
    t.stream = stream;
    t.rows = host_rows;
    if (m.hp.tap_host & bit) {
        m.tap_rows.resize(static_cast<size_t>(n_rows * width));
        TROUPE_CUDA_TRY(cudaMemcpyAsync(m.tap_rows.data(), rows, m.tap_rows.size() * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream));
        TROUPE_CUDA_TRY(cudaStreamSynchronize(stream));
        t.host_data = m.tap_rows.data();
    }
    if (const char* e = m.hp.tap(m.hp.tap_ctx, &t)) return fail("tap %d of layer %d: %s", tap, layer, e);
    return nullptr;
}

// Tap ids (plugins/include/troupe/taps.h; the backend includes no SDK header).
enum tap_id : int32_t {
    tap_attn_norm = 0,
    tap_q = 1,
    tap_k = 2,
    tap_v = 3,
    tap_attn_out = 4,
    tap_ffn_norm = 5,
    tap_ffn_hidden = 6,
    tap_layer_out = 7,
    tap_output_norm = 8,
    tap_logits = 9,
};

}  // namespace

const char* check_tree_call(const tree_call& c, int32_t n_tokens, const int32_t* seq_of,
                            const int32_t* block_table_offsets, int32_t block_size) {
    if (!c.mask_base || c.mask_words < 0 || c.mask_words > TROUPE_CUDA_MAX_MASK_WORDS || (c.mask_words > 0 && !c.mask))
        return fail("tree attention with mask_words %d%s%s: expected mask_base, 0..%d mask words and a mask",
                    c.mask_words, c.mask_base ? "" : " and no mask_base",
                    c.mask_words > 0 && !c.mask ? " and no mask" : "", TROUPE_CUDA_MAX_MASK_WORDS);
    for (int32_t t = 0; t < n_tokens; ++t) {
        int32_t highest = -1;
        for (int32_t w = 0; w < c.mask_words; ++w) {
            const uint64_t bits = c.mask[static_cast<size_t>(t) * c.mask_words + w];
            if (bits != 0) highest = 64 * w + 63 - __builtin_clzll(bits);
        }
        const int32_t last = std::max({c.rows[t], c.mask_base[t] - 1, highest < 0 ? 0 : c.mask_base[t] + highest});
        const int64_t covered =
            static_cast<int64_t>(block_table_offsets[seq_of[t] + 1] - block_table_offsets[seq_of[t]]) * block_size;
        if (c.rows[t] < 0 || c.mask_base[t] < 0 || last >= covered)
            return fail("tree token %d: row %d, mask_base %d, last row seen %d; its block table covers %lld rows", t,
                        c.rows[t], c.mask_base[t], last, static_cast<long long>(covered));
        if (c.mask_base[t] == 0 && highest < 0) return fail("tree token %d attends to no row", t);
    }
    return nullptr;
}

const char* model_forward(troupe_cuda_model* model, const troupe_cuda_batch* batch) {
    return model_forward_fenced(model, batch, nullptr, nullptr);
}

namespace {

// The step's activations (model.scratch) and the device copies of its indices.
struct step_views {
    float *x, *xn, *q, *k, *v, *att, *gate, *up, *logits;
    float *moe_logits, *moe_weights, *moe_hidden, *moe_out, *moe_y, *moe_up;  // experts' (scratch_layout)
    int32_t *moe_experts, *moe_rows;
    float *mla_qa, *mla_kv, *mla_q, *mla_o;  // latent attention's (scratch_layout)
    const int32_t* tokens;
    kv_tables tables;
    const int32_t* tiles = nullptr;  // prefill's attention tiles, or null (cuda_kernels.h)
    int32_t n_tiles = 0;
};

// Rows [e rows, (e + 1) rows) of a stacked experts' matrix [n_experts rows, n_in]: expert e's as a matrix of its own.
device_matrix expert_rows(const device_matrix& stacked, int32_t e, int64_t rows) {
    device_matrix w = stacked;
    w.data =
        static_cast<const char*>(stacked.data) + static_cast<size_t>(e) * rows * stacked.n_in * element_bytes(w.type);
    w.n_out = rows;
    return w;
}

// Prefill's routed experts into s.moe_out (in the rows' grouped order; s.moe_rows then holds that order): the
// routing copied to the host and the pairs grouped by expert (cuda_moe_groups.h), their inputs gathered, and one
// product per chosen expert over all of its rows (matmul_glu, then matmul), so each expert's weights are read once
// per step rather than once per (token, slot) pair. Only in eager steps: it waits for the routing (a step graph
// cannot), and step graphs take decode-sized steps only (step_graphs::max_tokens).
const char* moe_grouped(troupe_cuda_model& m, const device_layer& L, const float* xn, int32_t n, const step_views& s,
                        glu_kind glu, cudaStream_t stream) {
    troupe_cuda_context& ctx = *m.ctx;
    const auto& hp = m.hp;
    const int32_t k = hp.moe_n_used, pairs = n * k;
    const int64_t ffn = hp.moe_expert_ffn, dim = hp.dim;
    m.moe_experts.resize(pairs);
    TROUPE_CUDA_TRY(
        cudaMemcpyAsync(m.moe_experts.data(), s.moe_experts, sizeof(int32_t) * pairs, cudaMemcpyDeviceToHost, stream));
    TROUPE_CUDA_TRY(cudaStreamSynchronize(stream));
    moe_host_groups& g = m.moe_groups;
    if (!g.build(m.moe_experts.data(), n, k, hp.moe_n_experts))
        return "the experts' routing chose an expert id out of range";
    TROUPE_CUDA_TRY(
        cudaMemcpyAsync(s.moe_rows, g.rows.data(), sizeof(int32_t) * g.rows.size(), cudaMemcpyHostToDevice, stream));
    float* rows = s.moe_out;  // [pairs, dim]: the gathered inputs, each expert's overwritten by its outputs
    launch_moe_gather(xn, s.moe_rows, pairs, dim, rows, stream);
    TROUPE_CUDA_TRY(cudaGetLastError());
    for (int32_t e = 0; e < hp.moe_n_experts; ++e) {
        const int32_t c = g.count(e);
        if (c == 0) continue;
        const size_t r0 = static_cast<size_t>(g.offsets[e]);
        float* hidden = s.moe_hidden + r0 * ffn;
        TROUPE_CUDA_TRY_STATUS(matmul_glu(ctx, expert_rows(L.gate_exps, e, ffn), expert_rows(L.up_exps, e, ffn),
                                          rows + r0 * dim, hidden, s.moe_up + r0 * ffn, c, glu));
        TROUPE_CUDA_TRY_STATUS(matmul(ctx, expert_rows(L.down_exps, e, dim), hidden, rows + r0 * dim, c, false));
    }
    return nullptr;
}

// A MoE layer's FFN of the normed rows xn into s.moe_y (troupe_cuda_moe_layer): route, each (token, slot) pair's
// expert (decode-sized steps: a GEMV per pair; prefill: grouped by expert, moe_grouped), the weighted sum over slots,
// plus the shared experts where the layer has them.
const char* moe_ffn(troupe_cuda_model& m, const device_layer& L, const float* xn, int32_t n, const step_views& s,
                    glu_kind glu, cudaStream_t stream) {
    troupe_cuda_context& ctx = *m.ctx;
    const auto& hp = m.hp;
    const int32_t k = hp.moe_n_used, pairs = n * k;
    TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.router, xn, s.moe_logits, n, false));
    const moe_routing routing{hp.moe_n_experts, k, hp.moe_gating, hp.moe_norm_weights != 0, hp.moe_weights_scale};
    launch_moe_route(s.moe_logits, L.probs_bias, n, routing, s.moe_experts, s.moe_weights, stream);
    const bool grouped = n > step_graphs::max_tokens && element_bytes(L.gate_exps.type) > 0;
    if (grouped) {
        TROUPE_CUDA_TRY_STATUS(moe_grouped(m, L, xn, n, s, glu, stream));
    } else {
        const auto type = static_cast<dtype>(L.gate_exps.type);
        launch_moe_glu(type, L.gate_exps.data, L.up_exps.data, hp.dim, hp.moe_expert_ffn, xn, s.moe_experts, pairs, k,
                       glu, s.moe_hidden, stream);
        launch_moe_down(type, L.down_exps.data, hp.moe_expert_ffn, hp.dim, s.moe_hidden, s.moe_experts, pairs,
                        s.moe_out, stream);
    }
    launch_moe_combine(s.moe_out, s.moe_weights, n, k, hp.dim, grouped ? s.moe_rows + pairs : nullptr, s.moe_y, stream);
    TROUPE_CUDA_TRY(cudaGetLastError());
    if (L.gate_shexp.n_out > 0) {
        TROUPE_CUDA_TRY_STATUS(matmul_glu(ctx, L.gate_shexp, L.up_shexp, xn, s.gate, s.up, n, glu));
        TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.down_shexp, s.gate, s.moe_y, n, true));
    }
    return nullptr;
}

// x += w · in for the layer's branch output (attention's o, the FFN's down), or x += rms_norm(w · in) · post_norm
// where the layer has a post norm (the product then goes through `scratch` first); without one the product
// accumulates into x itself.
const char* add_branch(troupe_cuda_model& m, const device_matrix& w, const float* in, const float* post_norm,
                       float* scratch, float* x, int32_t n, cudaStream_t stream) {
    troupe_cuda_context& ctx = *m.ctx;
    if (!post_norm) return matmul(ctx, w, in, x, n, true);
    TROUPE_CUDA_TRY_STATUS(matmul(ctx, w, in, scratch, n, false));
    launch_rms_norm(scratch, post_norm, scratch, n, m.hp.dim, m.hp.rms_eps, stream);
    launch_add(x, scratch, static_cast<int64_t>(n) * m.hp.dim, stream);
    return nullptr;
}

// A latent-attention layer's block from the normed rows xn to its output in s.att ([n, H v_dim]), the layer's latent
// rows stored in `pool` (cuda_mla.h).
const char* mla_attention(troupe_cuda_model& m, int32_t il, const device_layer& L, const float* xn, int32_t n,
                          const step_views& s, void* pool, cudaStream_t stream) {
    troupe_cuda_context& ctx = *m.ctx;
    const auto& hp = m.hp;
    const mla_dims d{hp.n_heads, hp.mla_kv_lora_rank, hp.mla_qk_nope, hp.mla_rope_dim, hp.mla_v_dim};
    if (hp.mla_q_lora_rank > 0) {
        TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.mla_wq_a, xn, s.mla_qa, n, false));
        launch_rms_norm(s.mla_qa, L.mla_q_a_norm, s.mla_qa, n, hp.mla_q_lora_rank, hp.rms_eps, stream);
        TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.mla_wq_b, s.mla_qa, s.q, n, false));
    } else {
        TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.mla_wq, xn, s.q, n, false));
    }
    TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.mla_wkv_a, xn, s.mla_kv, n, false));
    TROUPE_CUDA_TRY_STATUS(
        report_tap(m, tap_q, il, s.q, n, static_cast<int64_t>(hp.n_heads) * (d.qk_nope + d.rope_dim), nullptr, stream));
    const float* rope_table = m.mla_rope.as<float>();
    const mla_rope rope{rope_table, rope_table + d.rope_dim / 2, hp.mla_yarn_factor};
    const bool kv_f16 = hp.kv_type == TROUPE_CUDA_F16;
    launch_mla_prepare(s.q, s.mla_kv, n, d, L.mla_kv_a_norm, hp.rms_eps, rope, s.tables, kv_f16, pool, stream);
    const auto wkv_b_type = static_cast<dtype>(L.mla_wkv_b.type);
    launch_mla_absorb(s.q, wkv_b_type, L.mla_wkv_b.data, n, d, s.mla_q, stream);
    launch_mla_attend(s.mla_q, s.mla_o, n, d, hp.attn_scale, s.tables, kv_f16, pool, m.mla_partials.as<float>(),
                      stream);
    launch_mla_expand(s.mla_o, wkv_b_type, L.mla_wkv_b.data, n, d, s.att, stream);
    TROUPE_CUDA_TRY(cudaGetLastError());
    return nullptr;
}

// A standard layer's attention block from the normed rows s.xn: q, k, v (biases where the layer has them), RoPE and
// the KV store, attention over the layer's K and V pools, then x += the output product (or its post norm's).
const char* standard_attention(troupe_cuda_model& m, int32_t il, const device_layer& L, int32_t n, const step_views& s,
                               cudaStream_t stream) {
    troupe_cuda_context& ctx = *m.ctx;
    const auto& hp = m.hp;
    const kv_tables& tables = s.tables;
    float *x = s.x, *xn = s.xn, *q = s.q, *k = s.k, *v = s.v, *att = s.att;
    char* k_pool = m.kv.as<char>(m.pool_bytes * (2 * il));
    char* v_pool = m.kv.as<char>(m.pool_bytes * (2 * il + 1));
    const int32_t kv_width = hp.n_kv_heads * hp.head_dim;
    const bool kv_f16 = hp.kv_type == TROUPE_CUDA_F16;
    const int32_t q_width = hp.n_heads * hp.head_dim;
    const float scale = hp.attn_scale > 0.0f ? hp.attn_scale : 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
    const rope_settings rope{hp.head_dim, hp.rope_n_rot, hp.rope_base, hp.rope_freq_scale, hp.rope_neox != 0};
    TROUPE_CUDA_TRY_STATUS(matmul_group(ctx, {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}}, xn, n));
    if (L.bq) {  // qwen2: biases after the products, before RoPE
        launch_add_bias(q, L.bq, n, q_width, stream);
        launch_add_bias(k, L.bk, n, kv_width, stream);
        launch_add_bias(v, L.bv, n, kv_width, stream);
    }
    TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_q, il, q, n, q_width, nullptr, stream));
    TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_k, il, k, n, kv_width, nullptr, stream));
    TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_v, il, v, n, kv_width, nullptr, stream));
    launch_rope_store_kv(q, k, v, n, hp.n_heads, hp.n_kv_heads, rope, tables, kv_f16, k_pool, v_pool, stream);
    launch_attention(q, att, n, hp.n_heads, hp.n_kv_heads, hp.head_dim, scale,
                     attention_features{hp.attn_softcap, L.window}, tables, kv_f16, k_pool, v_pool, stream,
                     m.attention_partials.data(), s.tiles, s.n_tiles);
    TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_attn_out, il, att, n, q_width, nullptr, stream));
    // The branch's output goes into xn (free once q, k, v are made) where a post norm follows it.
    TROUPE_CUDA_TRY_STATUS(add_branch(m, L.wo, att, L.post_attn_norm, xn, x, n, stream));
    return nullptr;
}

// Embedding and layers of one step on lane 0's stream: what a step graph holds (cuda_step_graphs.h). Only launches
// and cuBLASLt products on the stream; taps (host copies) run only where graphs are off (the model has observers).
const char* enqueue_layers(troupe_cuda_model& m, int32_t n, const step_views& s, cudaStream_t stream) {
    troupe_cuda_context& ctx = *m.ctx;
    const auto& hp = m.hp;
    float *x = s.x, *xn = s.xn, *att = s.att, *gate = s.gate, *up = s.up;

    const int64_t n_x = static_cast<int64_t>(n) * hp.dim;
    launch_embed(static_cast<dtype>(m.token_embd.type), m.token_embd.data, hp.dim, s.tokens, n, x, stream);
    if (hp.embed_scale > 0.0f && hp.embed_scale != 1.0f) launch_scale(x, hp.embed_scale, n_x, stream);
    for (int32_t il = 0; il < hp.n_layers; ++il) {
        const device_layer& L = m.layers[il];
        launch_rms_norm(x, L.attn_norm, xn, n, hp.dim, hp.rms_eps, stream);
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_attn_norm, il, xn, n, hp.dim, nullptr, stream));
        if (L.mla) {
            TROUPE_CUDA_TRY_STATUS(mla_attention(m, il, L, xn, n, s, m.kv.as<char>(m.pool_bytes * il), stream));
            const int64_t out_width = static_cast<int64_t>(hp.n_heads) * hp.mla_v_dim;
            TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_attn_out, il, att, n, out_width, nullptr, stream));
            TROUPE_CUDA_TRY_STATUS(add_branch(m, L.wo, att, L.post_attn_norm, xn, x, n, stream));
        } else {
            TROUPE_CUDA_TRY_STATUS(standard_attention(m, il, L, n, s, stream));
        }
        launch_rms_norm(x, L.ffn_norm, xn, n, hp.dim, hp.rms_eps, stream);
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_ffn_norm, il, xn, n, hp.dim, nullptr, stream));
        const glu_kind glu = hp.ffn_activation == TROUPE_CUDA_ACT_GELU_TANH ? glu_kind::gelu_tanh : glu_kind::silu;
        if (L.moe) {  // the experts' sum (no one hidden row to tap), then as a dense FFN's output
            TROUPE_CUDA_TRY_STATUS(moe_ffn(m, L, xn, n, s, glu, stream));
            if (L.post_ffn_norm) launch_rms_norm(s.moe_y, L.post_ffn_norm, s.moe_y, n, hp.dim, hp.rms_eps, stream);
            launch_add(x, s.moe_y, n_x, stream);
            TROUPE_CUDA_TRY(cudaGetLastError());
            TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_layer_out, il, x, n, hp.dim, nullptr, stream));
            continue;
        }
        TROUPE_CUDA_TRY_STATUS(matmul_glu(ctx, L.w_gate, L.w_up, xn, gate, up, n, glu));
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_ffn_hidden, il, gate, n, hp.ffn_dim, nullptr, stream));
        TROUPE_CUDA_TRY_STATUS(add_branch(m, L.w_down, gate, L.post_ffn_norm, xn, x, n, stream));
        TROUPE_CUDA_TRY(cudaGetLastError());
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_layer_out, il, x, n, hp.dim, nullptr, stream));
    }
    return nullptr;
}

}  // namespace

const char* model_forward_fenced(troupe_cuda_model* model, const troupe_cuda_batch* batch, troupe_cuda_fence_fn fence,
                                 void* arg) {
    troupe_cuda_model& m = *model;
    const troupe_cuda_batch& b = *batch;
    const auto& hp = m.hp;
    TROUPE_CUDA_TRY_STATUS(check_batch(m, b));
    if (b.n_tokens == 0) return nullptr;
    troupe_cuda_context& ctx = *m.ctx;
    TROUPE_CUDA_TRY_STATUS(begin_lane(ctx, 0));
    cudaStream_t stream = ctx.streams[0];

    if (b.n_tokens > m.capacity) {
        const int32_t capacity = std::max({b.n_tokens, 2 * m.capacity, 16});
        TROUPE_CUDA_TRY_STATUS(m.scratch.allocate(layout_for(hp, capacity).total, "the step's activations"));
        m.capacity = capacity;
    }
    if (m.attention_partials.size() == 0) {  // once: its counters start at zero and every launch leaves them so
        TROUPE_CUDA_TRY_STATUS(m.attention_partials.allocate(attention_split_scratch_bytes, "split attention"));
        TROUPE_CUDA_TRY(cudaMemsetAsync(m.attention_partials.data(), 0, attention_split_scratch_bytes, stream));
    }
    if (hp.mla_kv_lora_rank > 0 && m.mla_partials.size() == 0) {  // each launch writes the records it reads
        TROUPE_CUDA_TRY_STATUS(m.mla_partials.allocate(mla_split_scratch_bytes, "split latent attention"));
    }
    const scratch_layout lay = layout_for(hp, m.capacity);
    step_views s{};
    s.x = m.scratch.as<float>(lay.x.offset);
    s.xn = m.scratch.as<float>(lay.xn.offset);
    s.q = m.scratch.as<float>(lay.q.offset);
    s.k = m.scratch.as<float>(lay.k.offset);
    s.v = m.scratch.as<float>(lay.v.offset);
    s.att = m.scratch.as<float>(lay.att.offset);
    s.gate = m.scratch.as<float>(lay.gate.offset);
    s.up = m.scratch.as<float>(lay.up.offset);
    s.logits = m.scratch.as<float>(lay.logits.offset);
    s.moe_logits = m.scratch.as<float>(lay.moe_logits.offset);
    s.moe_experts = m.scratch.as<int32_t>(lay.moe_experts.offset);
    s.moe_weights = m.scratch.as<float>(lay.moe_weights.offset);
    s.moe_hidden = m.scratch.as<float>(lay.moe_hidden.offset);
    s.moe_out = m.scratch.as<float>(lay.moe_out.offset);
    s.moe_y = m.scratch.as<float>(lay.moe_y.offset);
    s.moe_up = m.scratch.as<float>(lay.moe_up.offset);
    s.moe_rows = m.scratch.as<int32_t>(lay.moe_rows.offset);
    s.mla_qa = m.scratch.as<float>(lay.mla_qa.offset);
    s.mla_kv = m.scratch.as<float>(lay.mla_kv.offset);
    s.mla_q = m.scratch.as<float>(lay.mla_q.offset);
    s.mla_o = m.scratch.as<float>(lay.mla_o.offset);

    // The index arrays, in one upload: tokens | positions | seq_of | offsets | out_tokens | tree | tables, the block
    // tables last so that where every array starts depends on the step's shape alone (a step graph bakes it in).
    const int32_t n_table = b.block_table_offsets[b.n_seqs];
    auto& hi = m.host_ints;
    hi.clear();
    hi.insert(hi.end(), b.tokens, b.tokens + b.n_tokens);
    hi.insert(hi.end(), b.positions, b.positions + b.n_tokens);
    hi.insert(hi.end(), b.seq_of, b.seq_of + b.n_tokens);
    hi.insert(hi.end(), b.block_table_offsets, b.block_table_offsets + b.n_seqs + 1);
    const size_t out_at = hi.size();
    hi.insert(hi.end(), b.out_tokens, b.out_tokens + b.n_out_rows);
    const bool tree = b.struct_size == sizeof(troupe_cuda_batch) && b.rows != nullptr;
    // Prefill's attention tiles (cuda_kernels.h), where the step has them.
    const bool tiled = attention_tiles(b.seq_of, b.positions, b.n_tokens, b.n_seqs, hp.head_dim, tree, m.tiles);
    const size_t tiles_at = hi.size();
    hi.insert(hi.end(), m.tiles.begin(), m.tiles.end());
    // A tree step: | rows | mask_base | (padding to 8 bytes) mask as pairs of ints
    size_t rows_at = 0, mask_at = 0;
    if (tree) {
        rows_at = hi.size();
        hi.insert(hi.end(), b.rows, b.rows + b.n_tokens);
        hi.insert(hi.end(), b.mask_base, b.mask_base + b.n_tokens);
        if (hi.size() % 2 != 0) hi.push_back(0);
        mask_at = hi.size();
        const size_t n_words = static_cast<size_t>(b.n_tokens) * b.mask_words;
        hi.resize(hi.size() + 2 * n_words);
        if (n_words > 0) std::memcpy(hi.data() + mask_at, b.mask, n_words * sizeof(uint64_t));
    }
    const size_t tables_at = hi.size();
    hi.insert(hi.end(), b.block_tables, b.block_tables + n_table);
    TROUPE_CUDA_TRY_STATUS(m.ints.grow(hi.size() * sizeof(int32_t) * 2, "the batch indices"));
    TROUPE_CUDA_TRY(
        cudaMemcpyAsync(m.ints.data(), hi.data(), hi.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    const int32_t* d_ints = m.ints.as<int32_t>();
    s.tokens = d_ints;
    kv_tables& tables = s.tables;
    tables.positions = d_ints + b.n_tokens;
    tables.seq_of = tables.positions + b.n_tokens;
    tables.block_table_offsets = tables.seq_of + b.n_tokens;
    tables.block_tables = d_ints + tables_at;
    tables.block_size = hp.block_size;
    const int32_t* d_out_tokens = d_ints + out_at;
    if (tiled) {
        s.tiles = d_ints + tiles_at;
        s.n_tiles = static_cast<int32_t>(m.tiles.size() / 2);
    }
    if (tree) {
        tables.rows = d_ints + rows_at;
        tables.mask_base = tables.rows + b.n_tokens;
        tables.mask = reinterpret_cast<const uint64_t*>(d_ints + mask_at);
        tables.mask_words = b.mask_words;
    }

    const int32_t n = b.n_tokens;
    const auto layers = [&] { return enqueue_layers(m, n, s, stream); };
    if (hp.tap_wanted != 0 || !m.externals.empty()) {
        // No graph where taps copy rows to the host mid-step, nor around plugins' kernels: their own buffers may
        // move between steps, and the ABI does not let them say when.
        TROUPE_CUDA_TRY_STATUS(layers());
    } else {
        const step_shape shape{n, b.n_seqs, b.n_out_rows, tree ? b.mask_words : -1, tiled};
        const step_buffers buffers{m.scratch.data(), m.ints.data(), ctx.act16.data(), ctx.external_out.data(),
                                   ctx.workspace.data()};
        TROUPE_CUDA_TRY_STATUS(m.graphs.run(shape, buffers, stream, layers));
    }
    if (fence) {
        // Every KV write of the step is enqueued: a copy lane may follow this point (the head only reads x).
        troupe_cuda_event* kv_done = nullptr;
        TROUPE_CUDA_TRY_STATUS(record_event(ctx, 0, &kv_done));
        fence(arg, kv_done);
    }
    if (b.n_out_rows > 0) {
        float* xn = s.xn;
        float* logits = s.logits;
        launch_gather_rows(s.x, d_out_tokens, b.n_out_rows, hp.dim, xn, stream);
        launch_rms_norm(xn, m.output_norm, xn, b.n_out_rows, hp.dim, hp.rms_eps, stream);
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_output_norm, -1, xn, b.n_out_rows, hp.dim, b.out_tokens, stream));
        TROUPE_CUDA_TRY_STATUS(matmul(ctx, m.output, xn, logits, b.n_out_rows, false));
        if (hp.final_softcap > 0.0f)
            launch_softcap(logits, hp.final_softcap, static_cast<int64_t>(b.n_out_rows) * hp.n_vocab, stream);
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_logits, -1, logits, b.n_out_rows, hp.n_vocab, b.out_tokens, stream));
        TROUPE_CUDA_TRY(cudaMemcpyAsync(b.logits, logits,
                                        static_cast<size_t>(b.n_out_rows) * hp.n_vocab * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream));
    }
    TROUPE_CUDA_TRY_STATUS(end_lane(ctx, 0));
    TROUPE_CUDA_TRY(cudaStreamSynchronize(stream));
    return nullptr;
}

}  // namespace troupe::cuda
