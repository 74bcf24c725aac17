// Weights upload, KV pools and the whole Llama forward on the device (cuda_model.h).
#include "kernels/cuda/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kernels/cuda/cuda_kernels.h"

namespace troupe::cuda {
namespace {

size_t align256(size_t bytes) {
    return (bytes + 255) & ~size_t{255};
}

// Offsets of the step's activations in model.scratch for `capacity` tokens (all float32):
//   x, xn [T, dim]; q, att [T, n_heads * head_dim]; k, v [T, n_kv_heads * head_dim]; gate, up [T, ffn_dim];
//   logits [T, n_vocab]
struct scratch_layout {
    size_t x, xn, q, k, v, att, gate, up, logits, total;
};

scratch_layout layout_for(const troupe_cuda_model_desc& hp, int32_t capacity) {
    const size_t t = static_cast<size_t>(capacity) * sizeof(float);
    scratch_layout l{};
    size_t at = 0;
    const auto take = [&](size_t width) {
        const size_t off = at;
        at += align256(t * width);
        return off;
    };
    l.x = take(hp.dim);
    l.xn = take(hp.dim);
    l.q = take(static_cast<size_t>(hp.n_heads) * hp.head_dim);
    l.k = take(static_cast<size_t>(hp.n_kv_heads) * hp.head_dim);
    l.v = take(static_cast<size_t>(hp.n_kv_heads) * hp.head_dim);
    l.att = take(static_cast<size_t>(hp.n_heads) * hp.head_dim);
    l.gate = take(hp.ffn_dim);
    l.up = take(hp.ffn_dim);
    l.logits = take(hp.n_vocab);
    l.total = at;
    return l;
}

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
    if (d.layer_features) {
        for (int32_t il = 0; il < d.n_layers; ++il) {
            if (d.layer_features[il].window < 0)
                return fail("layer %d has window %d: expected >= 0 (0: none)", il, d.layer_features[il].window);
        }
    }
    return nullptr;
}

const char* check_desc(const troupe_cuda_model_desc& d) {
    if (d.struct_size != sizeof(troupe_cuda_model_desc) && d.struct_size != TROUPE_CUDA_MODEL_DESC_V4_SIZE &&
        d.struct_size != TROUPE_CUDA_MODEL_DESC_V3_SIZE)
        return fail(
            "model description of %u bytes, this library takes %zu (or %zu without taps, %zu without architecture "
            "features)",
            d.struct_size, sizeof(troupe_cuda_model_desc), TROUPE_CUDA_MODEL_DESC_V4_SIZE,
            TROUPE_CUDA_MODEL_DESC_V3_SIZE);
    if (d.struct_size == sizeof(troupe_cuda_model_desc) && d.tap_wanted != 0 && !d.tap)
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
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.wq, what[1], hp.dim, q_width, dst.wq));
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.wk, what[2], hp.dim, kv_width, dst.wk));
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.wv, what[3], hp.dim, kv_width, dst.wv));
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.wo, what[4], q_width, hp.dim, dst.wo));
    TROUPE_CUDA_TRY_STATUS(upload_norm(m, src.ffn_norm, what[5], dst.ffn_norm));
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.w_gate, what[6], hp.dim, hp.ffn_dim, dst.w_gate));
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.w_up, what[7], hp.dim, hp.ffn_dim, dst.w_up));
    TROUPE_CUDA_TRY_STATUS(upload_weight(m, src.w_down, what[8], hp.ffn_dim, hp.dim, dst.w_down));
    return nullptr;
}

size_t kv_bytes_per_token(const troupe_cuda_model_desc& hp) {
    return static_cast<size_t>(hp.n_layers) * 2 * hp.n_kv_heads * hp.head_dim * element_bytes(hp.kv_type);
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
    m.pool_bytes = static_cast<size_t>(n_blocks) * hp.block_size * (per_token / (2 * hp.n_layers));
    TROUPE_CUDA_TRY_STATUS(m.kv.allocate(m.pool_bytes * 2 * hp.n_layers, "the KV pools"));
    TROUPE_CUDA_TRY(cudaMemsetAsync(m.kv.data(), 0, m.kv.size(), m.ctx->streams[0]));
    return nullptr;
}

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
    m->hp.layers = nullptr;
    m->hp.layer_features = nullptr;
    m->hp.token_embd = m->hp.output_norm = m->hp.output = troupe_cuda_matrix{};
    m->weights.reserve(static_cast<size_t>(desc->n_layers) * 14 + 3);
    m->layers.resize(desc->n_layers);
    for (int32_t il = 0; il < desc->n_layers; ++il) {
        TROUPE_CUDA_TRY_STATUS(upload_layer(*m, il, desc->layers[il], m->layers[il]));
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

namespace {

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

const char* model_forward(troupe_cuda_model* model, const troupe_cuda_batch* batch) {
    return model_forward_fenced(model, batch, nullptr, nullptr);
}

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
    const scratch_layout lay = layout_for(hp, m.capacity);
    float* x = m.scratch.as<float>(lay.x);
    float* xn = m.scratch.as<float>(lay.xn);
    float* q = m.scratch.as<float>(lay.q);
    float* k = m.scratch.as<float>(lay.k);
    float* v = m.scratch.as<float>(lay.v);
    float* att = m.scratch.as<float>(lay.att);
    float* gate = m.scratch.as<float>(lay.gate);
    float* up = m.scratch.as<float>(lay.up);
    float* logits = m.scratch.as<float>(lay.logits);

    // The index arrays, in one upload: tokens | positions | seq_of | offsets | tables | out_tokens
    const int32_t n_table = b.block_table_offsets[b.n_seqs];
    auto& hi = m.host_ints;
    hi.clear();
    hi.insert(hi.end(), b.tokens, b.tokens + b.n_tokens);
    hi.insert(hi.end(), b.positions, b.positions + b.n_tokens);
    hi.insert(hi.end(), b.seq_of, b.seq_of + b.n_tokens);
    hi.insert(hi.end(), b.block_table_offsets, b.block_table_offsets + b.n_seqs + 1);
    hi.insert(hi.end(), b.block_tables, b.block_tables + n_table);
    hi.insert(hi.end(), b.out_tokens, b.out_tokens + b.n_out_rows);
    // A tree step: | rows | mask_base | (padding to 8 bytes) mask as pairs of ints
    const bool tree = b.struct_size == sizeof(troupe_cuda_batch) && b.rows != nullptr;
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
    TROUPE_CUDA_TRY_STATUS(m.ints.grow(hi.size() * sizeof(int32_t) * 2, "the batch indices"));
    TROUPE_CUDA_TRY(
        cudaMemcpyAsync(m.ints.data(), hi.data(), hi.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    const int32_t* d_tokens = m.ints.as<int32_t>();
    kv_tables tables{};
    tables.positions = d_tokens + b.n_tokens;
    tables.seq_of = tables.positions + b.n_tokens;
    tables.block_table_offsets = tables.seq_of + b.n_tokens;
    tables.block_tables = tables.block_table_offsets + b.n_seqs + 1;
    tables.block_size = hp.block_size;
    const int32_t* d_out_tokens = tables.block_tables + n_table;
    if (tree) {
        tables.rows = d_tokens + rows_at;
        tables.mask_base = tables.rows + b.n_tokens;
        tables.mask = reinterpret_cast<const uint64_t*>(d_tokens + mask_at);
        tables.mask_words = b.mask_words;
    }

    const int32_t n = b.n_tokens;
    const int32_t kv_width = hp.n_kv_heads * hp.head_dim;
    const bool kv_f16 = hp.kv_type == TROUPE_CUDA_F16;
    const int32_t q_width = hp.n_heads * hp.head_dim;
    const float scale = hp.attn_scale > 0.0f ? hp.attn_scale : 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
    const rope_settings rope{hp.head_dim, hp.rope_n_rot, hp.rope_base, hp.rope_freq_scale, hp.rope_neox != 0};

    const int64_t n_x = static_cast<int64_t>(n) * hp.dim;
    launch_embed(static_cast<dtype>(m.token_embd.type), m.token_embd.data, hp.dim, d_tokens, n, x, stream);
    if (hp.embed_scale > 0.0f && hp.embed_scale != 1.0f) launch_scale(x, hp.embed_scale, n_x, stream);
    for (int32_t il = 0; il < hp.n_layers; ++il) {
        const device_layer& L = m.layers[il];
        char* k_pool = m.kv.as<char>(m.pool_bytes * (2 * il));
        char* v_pool = m.kv.as<char>(m.pool_bytes * (2 * il + 1));
        launch_rms_norm(x, L.attn_norm, xn, n, hp.dim, hp.rms_eps, stream);
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_attn_norm, il, xn, n, hp.dim, nullptr, stream));
        TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.wq, xn, q, n, false));
        TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.wk, xn, k, n, false));
        TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.wv, xn, v, n, false));
        if (L.bq) {  // qwen2: biases after the products, before RoPE
            launch_add_bias(q, L.bq, n, q_width, stream);
            launch_add_bias(k, L.bk, n, kv_width, stream);
            launch_add_bias(v, L.bv, n, kv_width, stream);
        }
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_q, il, q, n, q_width, nullptr, stream));
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_k, il, k, n, kv_width, nullptr, stream));
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_v, il, v, n, kv_width, nullptr, stream));
        launch_rope(q, tables.positions, n, hp.n_heads, rope, stream);
        launch_rope(k, tables.positions, n, hp.n_kv_heads, rope, stream);
        launch_store_kv(k, v, n, kv_width, tables, kv_f16, k_pool, v_pool, stream);
        launch_attention(q, att, n, hp.n_heads, hp.n_kv_heads, hp.head_dim, scale,
                         attention_features{hp.attn_softcap, L.window}, tables, kv_f16, k_pool, v_pool, stream);
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_attn_out, il, att, n, q_width, nullptr, stream));
        // The branch's output goes into xn (free once q, k, v are made) where a post norm follows it.
        if (L.post_attn_norm) {
            TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.wo, att, xn, n, false));
            launch_rms_norm(xn, L.post_attn_norm, xn, n, hp.dim, hp.rms_eps, stream);
            launch_add(x, xn, n_x, stream);
        } else {
            TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.wo, att, x, n, true));
        }
        launch_rms_norm(x, L.ffn_norm, xn, n, hp.dim, hp.rms_eps, stream);
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_ffn_norm, il, xn, n, hp.dim, nullptr, stream));
        TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.w_gate, xn, gate, n, false));
        TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.w_up, xn, up, n, false));
        const int64_t n_ffn = static_cast<int64_t>(n) * hp.ffn_dim;
        if (hp.ffn_activation == TROUPE_CUDA_ACT_GELU_TANH) {
            launch_geglu(gate, up, gate, n_ffn, stream);
        } else {
            launch_swiglu(gate, up, gate, n_ffn, stream);
        }
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_ffn_hidden, il, gate, n, hp.ffn_dim, nullptr, stream));
        if (L.post_ffn_norm) {
            TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.w_down, gate, xn, n, false));
            launch_rms_norm(xn, L.post_ffn_norm, xn, n, hp.dim, hp.rms_eps, stream);
            launch_add(x, xn, n_x, stream);
        } else {
            TROUPE_CUDA_TRY_STATUS(matmul(ctx, L.w_down, gate, x, n, true));
        }
        TROUPE_CUDA_TRY(cudaGetLastError());
        TROUPE_CUDA_TRY_STATUS(report_tap(m, tap_layer_out, il, x, n, hp.dim, nullptr, stream));
    }
    if (fence) {
        // Every KV write of the step is enqueued: a copy lane may follow this point (the head only reads x).
        troupe_cuda_event* kv_done = nullptr;
        TROUPE_CUDA_TRY_STATUS(record_event(ctx, 0, &kv_done));
        fence(arg, kv_done);
    }
    if (b.n_out_rows > 0) {
        launch_gather_rows(x, d_out_tokens, b.n_out_rows, hp.dim, xn, stream);
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

const char* model_copy_blocks(troupe_cuda_model* model, int32_t lane, const int32_t* src, const int32_t* dst,
                              int32_t n) {
    troupe_cuda_model& m = *model;
    for (int32_t i = 0; i < n; ++i) {
        if (src[i] < 0 || src[i] >= m.n_blocks || dst[i] < 0 || dst[i] >= m.n_blocks)
            return fail("copy of block %d to block %d: the pool has %d blocks", src[i], dst[i], m.n_blocks);
    }
    TROUPE_CUDA_TRY_STATUS(begin_lane(*m.ctx, lane));
    cudaStream_t stream = m.ctx->streams[lane];
    const size_t block_bytes = m.pool_bytes / m.n_blocks;
    for (int32_t pool = 0; pool < 2 * m.hp.n_layers; ++pool) {
        char* base = m.kv.as<char>(m.pool_bytes * pool);
        for (int32_t i = 0; i < n; ++i)
            TROUPE_CUDA_TRY(cudaMemcpyAsync(base + block_bytes * dst[i], base + block_bytes * src[i], block_bytes,
                                            cudaMemcpyDeviceToDevice, stream));
    }
    return end_lane(*m.ctx, lane);
}

const char* model_copy_rows(troupe_cuda_model* model, int32_t lane, const int32_t* src, const int32_t* dst, int32_t n) {
    troupe_cuda_model& m = *model;
    const int32_t n_rows = m.n_blocks * m.hp.block_size;
    for (int32_t i = 0; i < n; ++i) {
        if (src[i] < 0 || src[i] >= n_rows || dst[i] < 0 || dst[i] >= n_rows)
            return fail("copy of KV row %d to row %d: the pool has %d rows", src[i], dst[i], n_rows);
    }
    if (n <= 0) return nullptr;
    TROUPE_CUDA_TRY_STATUS(begin_lane(*m.ctx, lane));
    cudaStream_t stream = m.ctx->streams[lane];
    const size_t row_bytes = m.pool_bytes / n_rows;
    // In order, on one stream: a copy never runs before the ones listed earlier.
    for (int32_t i = 0; i < n; ++i) {
        for (int32_t pool = 0; pool < 2 * m.hp.n_layers; ++pool) {
            char* base = m.kv.as<char>(m.pool_bytes * pool);
            TROUPE_CUDA_TRY(cudaMemcpyAsync(base + row_bytes * dst[i], base + row_bytes * src[i], row_bytes,
                                            cudaMemcpyDeviceToDevice, stream));
        }
    }
    return end_lane(*m.ctx, lane);
}

namespace {

enum class swap_direction { to_host, to_device };

const char* swap_name(swap_direction dir) {
    switch (dir) {
        case swap_direction::to_host:
            return "read of KV blocks to the host";
        case swap_direction::to_device:
            return "write of KV blocks from the host";
    }
    return "?";
}

// Every pool's blocks[i] <-> host (p * n + i) * block_bytes, on `lane`. Runs of consecutive block ids
// are one copy per pool. The lane is synchronized on every path after begin_lane, so no copy still
// reads or writes the host buffer once this returns, also when it fails part-way.
const char* swap_blocks(troupe_cuda_model& m, int32_t lane, const int32_t* blocks, int32_t n, char* host,
                        swap_direction dir) {
    const char* what = swap_name(dir);
    if (n < 0) return fail("%s: %d blocks", what, n);
    if (n == 0) return nullptr;
    if (!blocks || !host) return fail("%s: %d blocks without a block list or a host buffer", what, n);
    for (int32_t i = 0; i < n; ++i) {
        if (blocks[i] < 0 || blocks[i] >= m.n_blocks)
            return fail("%s: block id %d (entry %d of %d) outside the pool of %d blocks", what, blocks[i], i, n,
                        m.n_blocks);
    }
    TROUPE_CUDA_TRY_STATUS(begin_lane(*m.ctx, lane));
    cudaStream_t stream = m.ctx->streams[lane];
    const size_t block_bytes = m.pool_bytes / m.n_blocks;
    cudaError_t e = cudaSuccess;
    for (int32_t pool = 0; pool < 2 * m.hp.n_layers && e == cudaSuccess; ++pool) {
        char* device_pool = m.kv.as<char>(m.pool_bytes * pool);
        char* host_pool = host + block_bytes * (static_cast<size_t>(pool) * n);
        for (int32_t i = 0; i < n && e == cudaSuccess;) {
            int32_t run = 1;
            while (i + run < n && blocks[i + run] == blocks[i] + run) ++run;
            char* d = device_pool + block_bytes * blocks[i];
            char* h = host_pool + block_bytes * i;
            const size_t bytes = block_bytes * run;
            e = dir == swap_direction::to_host ? cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, stream)
                                               : cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream);
            i += run;
        }
    }
    const char* ended = e == cudaSuccess ? end_lane(*m.ctx, lane) : nullptr;
    const cudaError_t synced = cudaStreamSynchronize(stream);
    if (e != cudaSuccess)
        return fail("%s: cudaMemcpyAsync failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    TROUPE_CUDA_TRY_STATUS(ended);
    if (synced != cudaSuccess)
        return fail("%s: cudaStreamSynchronize failed: %s (%s)", what, cudaGetErrorString(synced),
                    cudaGetErrorName(synced));
    return nullptr;
}

}  // namespace

const char* model_read_blocks(troupe_cuda_model* model, int32_t lane, const int32_t* blocks, int32_t n, void* host) {
    return swap_blocks(*model, lane, blocks, n, static_cast<char*>(host), swap_direction::to_host);
}

const char* model_write_blocks(troupe_cuda_model* model, int32_t lane, const int32_t* blocks, int32_t n,
                               const void* host) {
    // The buffer is only read on this path (a host-to-device copy).
    return swap_blocks(*model, lane, blocks, n, static_cast<char*>(const_cast<void*>(host)), swap_direction::to_device);
}

}  // namespace troupe::cuda
