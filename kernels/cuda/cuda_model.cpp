// Weights upload and KV pools of a model on the device (cuda_model.h): the description checked, every matrix
// uploaded on lane 0, the pools sized from the free memory. The forward is in cuda_model_forward.cpp, the KV
// block copies and swaps in cuda_model_kv.cpp.
#include "kernels/cuda/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kernels/cuda/cuda_kernels.h"

namespace troupe::cuda {
namespace {

const char* check_shape(const troupe_cuda_matrix& m, const char* what, int64_t n_in, int64_t n_out) {
    if (m.n_in != n_in || m.n_out != n_out)
        return fail("%s has shape [%lld, %lld] (n_out, n_in), expected [%lld, %lld]", what,
                    static_cast<long long>(m.n_out), static_cast<long long>(m.n_in), static_cast<long long>(n_out),
                    static_cast<long long>(n_in));
    return nullptr;
}

// The description's revision-4 fields (architecture features) where it has them, else the llama graph's zeros.
troupe_cuda_model_desc copy_desc(const troupe_cuda_model_desc& d) {
    troupe_cuda_model_desc c{};
    std::memcpy(&c, &d, std::min<size_t>(d.struct_size, sizeof c));
    c.struct_size = sizeof c;
    return c;
}

const char* check_features(const troupe_cuda_model_desc& d) {
    if (d.ffn_activation != TROUPE_CUDA_ACT_SILU && d.ffn_activation != TROUPE_CUDA_ACT_GELU_TANH)
        return fail("ffn_activation %d: the CUDA backend runs %d (SwiGLU) or %d (GeGLU)", d.ffn_activation,
                    TROUPE_CUDA_ACT_SILU, TROUPE_CUDA_ACT_GELU_TANH);
    const struct {
        float v;
        const char* name;
    } reals[] = {{d.embed_scale, "embed_scale"},
                 {d.attn_scale, "attn_scale"},
                 {d.attn_softcap, "attn_softcap"},
                 {d.final_softcap, "final_softcap"}};
    for (const auto& r : reals) {
        if (!(r.v >= 0.0f) || !std::isfinite(r.v))
            return fail("%s is %g: expected a finite value >= 0 (0: none)", r.name, r.v);
    }
    if (d.moe_layers) {
        if (d.moe_n_experts < 1 || d.moe_n_experts > TROUPE_CUDA_MAX_EXPERTS || d.moe_n_used < 1 ||
            d.moe_n_used > TROUPE_CUDA_MAX_EXPERTS_USED || d.moe_n_used > d.moe_n_experts || d.moe_expert_ffn < 1 ||
            d.moe_shared_ffn < 0 || (d.moe_gating != 1 && d.moe_gating != 2) || !(d.moe_weights_scale > 0.0f) ||
            !std::isfinite(d.moe_weights_scale))
            return fail(
                "experts: %d experts (1 to %d), %d used per token (1 to %d, at most the experts), expert FFN %d, "
                "shared "
                "FFN %d, gating %d (1 softmax, 2 sigmoid), weights scale %g (positive)",
                d.moe_n_experts, TROUPE_CUDA_MAX_EXPERTS, d.moe_n_used, TROUPE_CUDA_MAX_EXPERTS_USED, d.moe_expert_ffn,
                d.moe_shared_ffn, d.moe_gating, d.moe_weights_scale);
    }
    if (d.mla_layers) {
        const int32_t latent = d.mla_kv_lora_rank + d.mla_rope_dim;
        if (d.mla_kv_lora_rank < 1 || d.mla_rope_dim < 2 || d.mla_rope_dim % 2 != 0 || d.mla_qk_nope < 0 ||
            d.mla_v_dim < 1 || d.mla_q_lora_rank < 0 || latent > TROUPE_CUDA_MLA_MAX_LATENT || !d.mla_rope_freq ||
            !d.mla_rope_ramp || !(d.mla_yarn_factor > 0.0f) || !std::isfinite(d.mla_yarn_factor))
            return fail(
                "latent attention: kv_lora_rank %d (positive) + rope_dim %d (even, positive) at most %d, qk_nope %d, "
                "v_dim %d (positive), q_lora_rank %d, YaRN factor %g (positive), RoPE tables %s",
                d.mla_kv_lora_rank, d.mla_rope_dim, TROUPE_CUDA_MLA_MAX_LATENT, d.mla_qk_nope, d.mla_v_dim,
                d.mla_q_lora_rank, d.mla_yarn_factor, d.mla_rope_freq && d.mla_rope_ramp ? "given" : "missing");
    }
    if (d.layer_features) {
        for (int32_t il = 0; il < d.n_layers; ++il) {
            if (d.layer_features[il].window < 0)
                return fail("layer %d has window %d: expected >= 0 (0: none)", il, d.layer_features[il].window);
        }
    }
    return nullptr;
}

const char* check_desc(const troupe_cuda_model_desc& d) {
    if (d.struct_size != sizeof(troupe_cuda_model_desc) && d.struct_size != TROUPE_CUDA_MODEL_DESC_V8_SIZE &&
        d.struct_size != TROUPE_CUDA_MODEL_DESC_V6_SIZE && d.struct_size != TROUPE_CUDA_MODEL_DESC_V4_SIZE &&
        d.struct_size != TROUPE_CUDA_MODEL_DESC_V3_SIZE)
        return fail(
            "model description of %u bytes, this library takes %zu (or %zu without latent attention, %zu without "
            "experts, %zu without taps, %zu without architecture features)",
            d.struct_size, sizeof(troupe_cuda_model_desc), TROUPE_CUDA_MODEL_DESC_V8_SIZE,
            TROUPE_CUDA_MODEL_DESC_V6_SIZE, TROUPE_CUDA_MODEL_DESC_V4_SIZE, TROUPE_CUDA_MODEL_DESC_V3_SIZE);
    if (d.struct_size >= TROUPE_CUDA_MODEL_DESC_V6_SIZE && d.tap_wanted != 0 && !d.tap)
        return fail("the description asks for taps (bits %llx) without a tap function",
                    static_cast<unsigned long long>(d.tap_wanted));
    if (d.n_vocab <= 0 || d.dim <= 0 || d.n_layers <= 0 || d.n_heads <= 0 || d.n_kv_heads <= 0 || d.ffn_dim <= 0 ||
        d.n_ctx <= 0 || !d.layers)
        return fail(
            "model hyper-parameters must be positive (n_vocab %d, dim %d, n_layers %d, n_heads %d, "
            "n_kv_heads %d, ffn_dim %d, n_ctx %d)",
            d.n_vocab, d.dim, d.n_layers, d.n_heads, d.n_kv_heads, d.ffn_dim, d.n_ctx);
    if (d.n_heads % d.n_kv_heads != 0)
        return fail("n_heads %d is not a multiple of n_kv_heads %d", d.n_heads, d.n_kv_heads);
    if (d.head_dim <= 0 || d.head_dim % 2 != 0 || d.head_dim > max_head_dim)
        return fail("head_dim %d: the CUDA backend takes even head sizes up to %d", d.head_dim, max_head_dim);
    if (d.kv_type != TROUPE_CUDA_F32 && d.kv_type != TROUPE_CUDA_F16)
        return fail("KV cache type %s: the CUDA backend keeps F32 or F16", type_name(d.kv_type));
    if (d.block_size <= 0 || d.n_blocks < 0) return fail("block_size %d, n_blocks %d", d.block_size, d.n_blocks);
    if (!(d.rope_freq_scale > 0.0f) || !(d.rope_base > 0.0f))
        return fail("rope_base %g and rope_freq_scale %g must be positive", d.rope_base, d.rope_freq_scale);
    if (d.rope_n_rot <= 0 || d.rope_n_rot % 2 != 0 || d.rope_n_rot > d.head_dim)
        return fail("rope_n_rot %d: rotated dimensions must be even and at most head_dim %d", d.rope_n_rot, d.head_dim);
    return check_features(copy_desc(d));
}

// An F32 vector of `width` (a norm weight or a bias).
const char* upload_vector(troupe_cuda_model& m, const troupe_cuda_matrix& src, const char* what, int64_t width,
                          const float*& out) {
    if (src.type != TROUPE_CUDA_F32)
        return fail("%s is %s, the backend takes F32 norm weights and biases", what, type_name(src.type));
    TROUPE_CUDA_TRY_STATUS(check_shape(src, what, width, 1));
    device_matrix dm;
    m.weights.emplace_back();
    TROUPE_CUDA_TRY_STATUS(upload_matrix(src, what, m.weights.back(), dm, m.ctx->streams[0]));
    m.weight_bytes += m.weights.back().size();
    out = static_cast<const float*>(dm.data);
    return nullptr;
}

const char* upload_norm(troupe_cuda_model& m, const troupe_cuda_matrix& src, const char* what, const float*& out) {
    return upload_vector(m, src, what, m.hp.dim, out);
}

// An optional vector: absent (data null) leaves `out` null.
const char* upload_optional(troupe_cuda_model& m, const troupe_cuda_matrix& src, int32_t il, const char* name,
                            int64_t width, const float*& out) {
    out = nullptr;
    if (!src.data) return nullptr;
    char what[64];
    std::snprintf(what, sizeof what, "layer %d %s", il, name);
    return upload_vector(m, src, what, width, out);
}

const char* upload_features(troupe_cuda_model& m, int32_t il, const troupe_cuda_layer_features& src,
                            device_layer& dst) {
    const auto& hp = m.hp;
    const int64_t q_width = static_cast<int64_t>(hp.n_heads) * hp.head_dim;
    const int64_t kv_width = static_cast<int64_t>(hp.n_kv_heads) * hp.head_dim;
    if ((src.bq.data != nullptr) != (src.bk.data != nullptr) || (src.bq.data != nullptr) != (src.bv.data != nullptr))
        return fail("layer %d has biases for only some of q, k, v (bq %s, bk %s, bv %s)", il,
                    src.bq.data ? "set" : "null", src.bk.data ? "set" : "null", src.bv.data ? "set" : "null");
    TROUPE_CUDA_TRY_STATUS(upload_optional(m, src.bq, il, "bq", q_width, dst.bq));
    TROUPE_CUDA_TRY_STATUS(upload_optional(m, src.bk, il, "bk", kv_width, dst.bk));
    TROUPE_CUDA_TRY_STATUS(upload_optional(m, src.bv, il, "bv", kv_width, dst.bv));
    TROUPE_CUDA_TRY_STATUS(upload_optional(m, src.post_attn_norm, il, "post_attn_norm", hp.dim, dst.post_attn_norm));
    TROUPE_CUDA_TRY_STATUS(upload_optional(m, src.post_ffn_norm, il, "post_ffn_norm", hp.dim, dst.post_ffn_norm));
    dst.window = src.window;
    return nullptr;
}

const char* upload_weight(troupe_cuda_model& m, const troupe_cuda_matrix& src, const char* what, int64_t n_in,
                          int64_t n_out, device_matrix& out) {
    TROUPE_CUDA_TRY_STATUS(check_shape(src, what, n_in, n_out));
    if (src.type == TROUPE_CUDA_EXTERNAL) {
        const auto* ext = static_cast<const troupe_cuda_external_matrix*>(src.data);
        if (!ext || ext->struct_size < sizeof(troupe_cuda_external_matrix) || !ext->matmul)
            return fail("%s is external (a plugin's weight) without a complete troupe_cuda_external_matrix", what);
        m.externals.push_back(std::make_unique<troupe_cuda_external_matrix>(*ext));
        out = device_matrix{TROUPE_CUDA_EXTERNAL, m.externals.back().get(), n_in, n_out};
        m.weight_bytes += ext->device_bytes;
        return nullptr;
    }
    m.weights.emplace_back();
    TROUPE_CUDA_TRY_STATUS(upload_matrix(src, what, m.weights.back(), out, m.ctx->streams[0]));
    m.weight_bytes += m.weights.back().size();
    return nullptr;
}

const char* upload_layer(troupe_cuda_model& m, int32_t il, const troupe_cuda_layer& src, device_layer& dst) {
    const auto& hp = m.hp;
    const int64_t q_width = static_cast<int64_t>(hp.n_heads) * hp.head_dim;
    const int64_t kv_width = static_cast<int64_t>(hp.n_kv_heads) * hp.head_dim;
    char what[9][64];
    const char* names[9] = {"attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down"};
    for (int i = 0; i < 9; ++i) std::snprintf(what[i], sizeof what[i], "layer %d %s", il, names[i]);
    TROUPE_CUDA_TRY_STATUS(upload_norm(m, src.attn_norm, what[0], dst.attn_norm));
    if (!dst.mla) {  // a latent layer's queries and keys are its MLA block's (upload_mla)
        TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.wq, what[1], hp.dim, q_width, dst.wq));
        TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.wk, what[2], hp.dim, kv_width, dst.wk));
        TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.wv, what[3], hp.dim, kv_width, dst.wv));
    }
    const int64_t o_width = dst.mla ? static_cast<int64_t>(hp.n_heads) * hp.mla_v_dim : q_width;
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.wo, what[4], o_width, hp.dim, dst.wo));
    TROUPE_CUDA_TRY_STATUS(upload_norm(m, src.ffn_norm, what[5], dst.ffn_norm));
    if (dst.moe) return nullptr;  // the experts are its FFN (upload_moe)
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.w_gate, what[6], hp.dim, hp.ffn_dim, dst.w_gate));
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.w_up, what[7], hp.dim, hp.ffn_dim, dst.w_up));
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.w_down, what[8], hp.ffn_dim, hp.dim, dst.w_down));
    return nullptr;
}

// A MoE layer's router, experts and shared experts (troupe_cuda_moe_layer); the stacked experts the backend's own
// types (its kernels index their rows).
const char* upload_moe(troupe_cuda_model& m, int32_t il, const troupe_cuda_moe_layer& src, device_layer& dst) {
    const auto& hp = m.hp;
    const int64_t e = hp.moe_n_experts, f = hp.moe_expert_ffn, sh = hp.moe_shared_ffn;
    char what[8][64];
    const char* names[8] = {"ffn_gate_inp", "ffn_gate_exps",  "ffn_up_exps",  "ffn_down_exps",
                            "exp_probs_b",  "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"};
    for (int i = 0; i < 8; ++i) std::snprintf(what[i], sizeof what[i], "layer %d %s", il, names[i]);
    const troupe_cuda_matrix* stacked[4] = {&src.router, &src.gate_exps, &src.up_exps, &src.down_exps};
    for (int i = 0; i < 4; ++i) {
        if (stacked[i]->type == TROUPE_CUDA_EXTERNAL)
            return fail("%s is a plugin's weight: the expert kernels read rows of F32, F16 or BF16", what[i]);
    }
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.router, what[0], hp.dim, e, dst.router));
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.gate_exps, what[1], hp.dim, e * f, dst.gate_exps));
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.up_exps, what[2], hp.dim, e * f, dst.up_exps));
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.down_exps, what[3], f, e * hp.dim, dst.down_exps));
    if (dst.gate_exps.type != dst.up_exps.type || dst.gate_exps.type != dst.down_exps.type)
        return fail("layer %d: the experts' gate, up and down matrices are %s, %s and %s: expected one type", il,
                    type_name(dst.gate_exps.type), type_name(dst.up_exps.type), type_name(dst.down_exps.type));
    TROUPE_CUDA_TRY_STATUS(upload_optional(m, src.probs_bias, il, "exp_probs_b", e, dst.probs_bias));
    if (sh > 0) {
        TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.gate_shexp, what[5], hp.dim, sh, dst.gate_shexp));
        TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.up_shexp, what[6], hp.dim, sh, dst.up_shexp));
        TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.down_shexp, what[7], sh, hp.dim, dst.down_shexp));
    }
    return nullptr;
}

// A latent layer's block (troupe_cuda_mla_layer): its query products (direct, or through the LoRA and its norm), the
// latent product and norm, and attn_kv_b, whose rows the latent kernels read (the backend's own types).
const char* upload_mla(troupe_cuda_model& m, int32_t il, const troupe_cuda_mla_layer& src, device_layer& dst) {
    const auto& hp = m.hp;
    const int64_t heads = hp.n_heads, rank = hp.mla_kv_lora_rank, q_rows = heads * (hp.mla_qk_nope + hp.mla_rope_dim);
    char what[7][64];
    const char* names[7] = {"attn_q",        "attn_q_a",       "attn_q_a_norm", "attn_q_b",
                            "attn_kv_a_mqa", "attn_kv_a_norm", "attn_kv_b"};
    for (int i = 0; i < 7; ++i) std::snprintf(what[i], sizeof what[i], "layer %d %s", il, names[i]);
    if (hp.mla_q_lora_rank > 0) {
        TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.wq_a, what[1], hp.dim, hp.mla_q_lora_rank, dst.mla_wq_a));
        TROUPE_CUDA_TRY_STATUS(upload_vector(m, src.q_a_norm, what[2], hp.mla_q_lora_rank, dst.mla_q_a_norm));
        TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.wq_b, what[3], hp.mla_q_lora_rank, q_rows, dst.mla_wq_b));
    } else {
        TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.wq, what[0], hp.dim, q_rows, dst.mla_wq));
    }
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.wkv_a, what[4], hp.dim, rank + hp.mla_rope_dim, dst.mla_wkv_a));
    TROUPE_CUDA_TRY_STATUS(upload_vector(m, src.kv_a_norm, what[5], rank, dst.mla_kv_a_norm));
    if (src.wkv_b.type == TROUPE_CUDA_EXTERNAL)
        return fail("%s is a plugin's weight: the latent kernels read rows of F32, F16 or BF16", what[6]);
    return upload_weight(m, src.wkv_b, what[6], rank, heads * (hp.mla_qk_nope + hp.mla_v_dim), dst.mla_wkv_b);
}

// The RoPE tables of latent attention, [freq | ramp] (cuda_backend_abi.h revision 10), on the device.
const char* upload_mla_rope(troupe_cuda_model& m, const troupe_cuda_model_desc& d) {
    const size_t pairs = static_cast<size_t>(d.mla_rope_dim / 2);
    std::vector<float> table(d.mla_rope_freq, d.mla_rope_freq + pairs);
    table.insert(table.end(), d.mla_rope_ramp, d.mla_rope_ramp + pairs);
    TROUPE_CUDA_TRY_STATUS(m.mla_rope.allocate(table.size() * sizeof(float), "latent attention's RoPE tables"));
    TROUPE_CUDA_TRY(cudaMemcpyAsync(m.mla_rope.data(), table.data(), table.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, m.ctx->streams[0]));
    return cudaStreamSynchronize(m.ctx->streams[0]) == cudaSuccess ? nullptr : fail("uploading the RoPE tables failed");
}

// A layer's K and V rows per token, or its latent row (revision 10).
size_t layer_row_elements(const troupe_cuda_model_desc& hp) {
    if (hp.mla_kv_lora_rank > 0) return static_cast<size_t>(hp.mla_kv_lora_rank) + hp.mla_rope_dim;
    return static_cast<size_t>(2) * hp.n_kv_heads * hp.head_dim;
}

size_t kv_bytes_per_token(const troupe_cuda_model_desc& hp) {
    return static_cast<size_t>(hp.n_layers) * layer_row_elements(hp) * element_bytes(hp.kv_type);
}

const char* allocate_kv(troupe_cuda_model& m) {
    const auto& hp = m.hp;
    const size_t per_token = kv_bytes_per_token(hp);
    int64_t n_blocks = hp.n_blocks;
    if (n_blocks == 0) {
        size_t free_bytes = 0, total_bytes = 0;
        TROUPE_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
        const double fraction = hp.kv_memory_fraction > 0.0f ? hp.kv_memory_fraction : 0.5;
        int64_t tokens = static_cast<int64_t>(fraction * static_cast<double>(free_bytes) / per_token);
        if (hp.max_kv_tokens > 0) tokens = std::min(tokens, hp.max_kv_tokens);
        n_blocks = tokens / hp.block_size;
        if (n_blocks < 1)
            return fail("no room for one KV block of %d tokens (%zu bytes per token, %.1f MiB free)", hp.block_size,
                        per_token, static_cast<double>(free_bytes) / (1 << 20));
    }
    n_blocks = std::min<int64_t>(n_blocks, INT32_MAX / std::max(hp.block_size, 1));
    m.n_blocks = static_cast<int32_t>(n_blocks);
    m.n_pools = hp.mla_kv_lora_rank > 0 ? hp.n_layers : 2 * hp.n_layers;
    m.pool_bytes = static_cast<size_t>(n_blocks) * hp.block_size * (per_token / m.n_pools);
    TROUPE_CUDA_TRY_STATUS(m.kv.allocate(m.pool_bytes * m.n_pools, "the KV pools"));
    TROUPE_CUDA_TRY(cudaMemsetAsync(m.kv.data(), 0, m.kv.size(), m.ctx->streams[0]));
    return nullptr;
}

}  // namespace

const char* upload_matrix(const troupe_cuda_matrix& m, const char* what, device_buffer& buf, device_matrix& out,
                          cudaStream_t stream) {
    const size_t elem = element_bytes(m.type);
    if (elem == 0) return fail("%s is of type %u: the CUDA backend takes F32, F16 or BF16", what, m.type);
    if (!m.data || m.n_in <= 0 || m.n_out <= 0) return fail("%s has no data or an empty shape", what);
    const size_t row = static_cast<size_t>(m.n_in) * elem;
    if (m.row_stride < row) return fail("%s has a row stride of %zu bytes, rows need %zu", what, m.row_stride, row);
    TROUPE_CUDA_TRY_STATUS(buf.allocate(row * m.n_out, what));
    TROUPE_CUDA_TRY(
        cudaMemcpy2DAsync(buf.data(), row, m.data, m.row_stride, row, m.n_out, cudaMemcpyHostToDevice, stream));
    out = device_matrix{m.type, buf.data(), m.n_in, m.n_out};
    return nullptr;
}

const char* model_create(troupe_cuda_context* ctx, const troupe_cuda_model_desc* desc, troupe_cuda_model** out) {
    *out = nullptr;
    TROUPE_CUDA_TRY_STATUS(check_desc(*desc));
    TROUPE_CUDA_TRY(cudaSetDevice(ctx->device));
    auto m = std::make_unique<troupe_cuda_model>();
    m->ctx = ctx;
    m->hp = copy_desc(*desc);
    const troupe_cuda_layer_features* features = m->hp.layer_features;
    const troupe_cuda_moe_layer* moe = m->hp.moe_layers;
    const troupe_cuda_mla_layer* mla = m->hp.mla_layers;
    m->hp.layers = nullptr;
    m->hp.layer_features = nullptr;
    m->hp.moe_layers = nullptr;  // the forward reads the counts below, zero without experts
    if (!moe) {
        m->hp.moe_n_experts = m->hp.moe_n_used = m->hp.moe_expert_ffn = m->hp.moe_shared_ffn = 0;
    }
    m->hp.mla_layers = nullptr;  // likewise the latent widths, zero without latent attention
    m->hp.mla_rope_freq = m->hp.mla_rope_ramp = nullptr;
    if (!mla) {
        m->hp.mla_q_lora_rank = m->hp.mla_kv_lora_rank = m->hp.mla_qk_nope = m->hp.mla_rope_dim = m->hp.mla_v_dim = 0;
    } else {
        TROUPE_CUDA_TRY_STATUS(upload_mla_rope(*m, *desc));
    }
    m->hp.token_embd = m->hp.output_norm = m->hp.output = troupe_cuda_matrix{};
    m->weights.reserve(static_cast<size_t>(desc->n_layers) * 22 + 3);
    m->layers.resize(desc->n_layers);
    for (int32_t il = 0; il < desc->n_layers; ++il) {
        m->layers[il].moe = moe != nullptr && moe[il].router.data != nullptr;
        m->layers[il].mla = mla != nullptr;
        TROUPE_CUDA_TRY_STATUS(upload_layer(*m, il, desc->layers[il], m->layers[il]));
        if (m->layers[il].mla) TROUPE_CUDA_TRY_STATUS(upload_mla(*m, il, mla[il], m->layers[il]));
        if (m->layers[il].moe) TROUPE_CUDA_TRY_STATUS(upload_moe(*m, il, moe[il], m->layers[il]));
        if (features) TROUPE_CUDA_TRY_STATUS(upload_features(*m, il, features[il], m->layers[il]));
    }
    if (desc->token_embd.type == TROUPE_CUDA_EXTERNAL)
        return fail("token_embd is a plugin's weight: the embedding lookup reads rows of F32, F16 or BF16");
    TROUPE_CUDA_TRY_STATUS(upload_weight(*m, desc->token_embd, "token_embd", desc->dim, desc->n_vocab, m->token_embd));
    TROUPE_CUDA_TRY_STATUS(upload_norm(*m, desc->output_norm, "output_norm", m->output_norm));
    if (desc->output.data == desc->token_embd.data && desc->output.type == desc->token_embd.type) {
        m->output = m->token_embd;  // tied embeddings: one copy
    } else {
        TROUPE_CUDA_TRY_STATUS(upload_weight(*m, desc->output, "output", desc->dim, desc->n_vocab, m->output));
    }
    TROUPE_CUDA_TRY_STATUS(allocate_kv(*m));
    TROUPE_CUDA_TRY(cudaStreamSynchronize(ctx->streams[0]));
    *out = m.release();
    return nullptr;
}

void model_destroy(troupe_cuda_model* model) {
    if (!model) return;
    cudaSetDevice(model->ctx->device);
    for (cudaStream_t s : model->ctx->streams) cudaStreamSynchronize(s);
    delete model;
}

void model_info(const troupe_cuda_model* model, troupe_cuda_model_info* info) {
    info->struct_size = sizeof(troupe_cuda_model_info);
    info->block_size = model->hp.block_size;
    info->n_blocks = model->n_blocks;
    info->weight_bytes = model->weight_bytes;
    info->kv_bytes = model->kv.size();
}

}  // namespace troupe::cuda
