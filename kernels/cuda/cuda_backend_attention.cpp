// The attention entry points of the backend's host-buffer tests (cuda_backend_tests.h): the standard attention over
// K and V pools and the latent attention's four kernels, each after checking every index it will follow.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_backend_tests.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_mla.h"
#include "kernels/cuda/cuda_model.h"

namespace troupe::cuda {
namespace {

// The block tables and each token's sequence and position of a test call, checked before any kernel follows them.
const char* check_test_tables(int32_t n_tokens, const int32_t* positions, const int32_t* seq_of, int32_t n_seqs,
                              const int32_t* block_table_offsets, const int32_t* block_tables, int32_t block_size,
                              int32_t n_blocks) {
    const int32_t n_table = block_table_offsets[n_seqs];
    for (int32_t i = 0; i < n_table; ++i) {
        if (block_tables[i] < 0 || block_tables[i] >= n_blocks)
            return fail("block id %d outside the pool of %d blocks", block_tables[i], n_blocks);
    }
    for (int32_t t = 0; t < n_tokens; ++t) {
        const int32_t s = seq_of[t];
        if (s < 0 || s >= n_seqs) return fail("token %d belongs to sequence %d of %d", t, s, n_seqs);
        const int32_t covered = (block_table_offsets[s + 1] - block_table_offsets[s]) * block_size;
        if (positions[t] < 0 || positions[t] >= covered)
            return fail("token %d at position %d: its block table covers %d", t, positions[t], covered);
    }
    return nullptr;
}

// A test call's index arrays on the device, as kv_tables (tree fields where rows is set).
struct test_tables {
    device_buffer pos, seq, off, tab, rows, base, mask;
    kv_tables tables{};

    const char* upload_all(int32_t n_tokens, const int32_t* positions, const int32_t* seq_of, int32_t n_seqs,
                           const int32_t* offsets, const int32_t* block_tables, int32_t block_size,
                           const int32_t* tree_rows, const int32_t* mask_base, const uint64_t* tree_mask,
                           int32_t mask_words, cudaStream_t st) {
        TROUPE_CUDA_TRY_STATUS(upload(positions, n_tokens * sizeof(int32_t), pos, "positions", st));
        TROUPE_CUDA_TRY_STATUS(upload(seq_of, n_tokens * sizeof(int32_t), seq, "seq_of", st));
        TROUPE_CUDA_TRY_STATUS(upload(offsets, (n_seqs + 1) * sizeof(int32_t), off, "offsets", st));
        TROUPE_CUDA_TRY_STATUS(upload(block_tables, offsets[n_seqs] * sizeof(int32_t), tab, "block tables", st));
        tables = kv_tables{pos.as<int32_t>(), seq.as<int32_t>(), off.as<int32_t>(), tab.as<int32_t>(), block_size};
        if (!tree_rows) return nullptr;
        TROUPE_CUDA_TRY_STATUS(upload(tree_rows, n_tokens * sizeof(int32_t), rows, "rows", st));
        TROUPE_CUDA_TRY_STATUS(upload(mask_base, n_tokens * sizeof(int32_t), base, "mask_base", st));
        const size_t mask_bytes = static_cast<size_t>(n_tokens) * mask_words * sizeof(uint64_t);
        if (mask_bytes > 0) TROUPE_CUDA_TRY_STATUS(upload(tree_mask, mask_bytes, mask, "mask", st));
        tables.rows = rows.as<int32_t>();
        tables.mask_base = base.as<int32_t>();
        tables.mask = mask_bytes > 0 ? mask.as<uint64_t>() : nullptr;
        tables.mask_words = mask_words;
        return nullptr;
    }
};

}  // namespace

const char* test_attention(troupe_cuda_context* ctx, const troupe_cuda_attention_args* args) {
    const troupe_cuda_attention_args& a = *args;
    if (a.struct_size != sizeof a && a.struct_size != TROUPE_CUDA_ATTENTION_ARGS_V3_SIZE &&
        a.struct_size != TROUPE_CUDA_ATTENTION_ARGS_V2_SIZE)
        return fail(
            "attention arguments of %u bytes, expected %zu (or %zu without soft-capping and windows, %zu "
            "without trees)",
            a.struct_size, sizeof a, TROUPE_CUDA_ATTENTION_ARGS_V3_SIZE, TROUPE_CUDA_ATTENTION_ARGS_V2_SIZE);
    const bool tree = a.struct_size >= TROUPE_CUDA_ATTENTION_ARGS_V3_SIZE && a.rows != nullptr;
    attention_features features{};
    if (a.struct_size == sizeof a) features = attention_features{a.softcap, a.window};
    if (!(features.softcap >= 0.0f) || !std::isfinite(features.softcap) || features.window < 0)
        return fail("attention softcap %g and window %d: expected a finite softcap >= 0 and a window >= 0 (0: none)",
                    features.softcap, features.window);
    if (tree) {
        TROUPE_CUDA_TRY_STATUS(check_tree_call({a.rows, a.mask_base, a.mask, a.mask_words}, a.n_tokens, a.seq_of,
                                               a.block_table_offsets, a.block_size));
    }
    if (a.head_dim > max_head_dim || a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
        return fail("attention shape: %d heads, %d KV heads, head size %d", a.n_heads, a.n_kv_heads, a.head_dim);
    TROUPE_CUDA_TRY_STATUS(check_test_tables(a.n_tokens, a.positions, a.seq_of, a.n_seqs, a.block_table_offsets,
                                             a.block_tables, a.block_size, a.n_blocks));
    TROUPE_CUDA_TRY_STATUS(begin_lane(*ctx, 0));
    cudaStream_t st = ctx->streams[0];
    const bool kv_f16 = a.kv_type == TROUPE_CUDA_F16;
    const size_t kv_width = static_cast<size_t>(a.n_kv_heads) * a.head_dim;
    const size_t q_bytes = static_cast<size_t>(a.n_tokens) * a.n_heads * a.head_dim * sizeof(float);
    const size_t kv_bytes = a.n_tokens * kv_width * sizeof(float);
    const size_t pool_bytes = static_cast<size_t>(a.n_blocks) * a.block_size * kv_width * (kv_f16 ? 2 : 4);
    device_buffer dq, dk, dv, dout, dkp, dvp;
    TROUPE_CUDA_TRY_STATUS(upload(a.q, q_bytes, dq, "q", st));
    TROUPE_CUDA_TRY_STATUS(upload(a.k, kv_bytes, dk, "k", st));
    TROUPE_CUDA_TRY_STATUS(upload(a.v, kv_bytes, dv, "v", st));
    TROUPE_CUDA_TRY_STATUS(dout.allocate(q_bytes, "out"));
    TROUPE_CUDA_TRY_STATUS(upload(a.k_pool, pool_bytes, dkp, "k pool", st));
    TROUPE_CUDA_TRY_STATUS(upload(a.v_pool, pool_bytes, dvp, "v pool", st));
    test_tables tt;
    TROUPE_CUDA_TRY_STATUS(tt.upload_all(a.n_tokens, a.positions, a.seq_of, a.n_seqs, a.block_table_offsets,
                                         a.block_tables, a.block_size, tree ? a.rows : nullptr, a.mask_base, a.mask,
                                         a.mask_words, st));
    const kv_tables& tables = tt.tables;
    launch_store_kv(dk.as<float>(), dv.as<float>(), a.n_tokens, static_cast<int32_t>(kv_width), tables, kv_f16,
                    dkp.data(), dvp.data(), st);
    // Prefill's tiled kernel where it applies (several tokens of a sequence at consecutive positions), else the
    // per-token one: the reference checks whichever a step of this batch would run.
    std::vector<int32_t> tiles;
    device_buffer dtiles;
    const bool tiled = attention_tiles(a.seq_of, a.positions, a.n_tokens, a.n_seqs, a.head_dim, tree, tiles);
    if (tiled) TROUPE_CUDA_TRY_STATUS(upload(tiles.data(), tiles.size() * sizeof(int32_t), dtiles, "tiles", st));
    device_buffer partials;  // the split decode kernel's, as a model step has them
    TROUPE_CUDA_TRY_STATUS(partials.allocate(attention_split_scratch_bytes, "split attention"));
    TROUPE_CUDA_TRY(cudaMemsetAsync(partials.data(), 0, attention_split_scratch_bytes, st));
    launch_attention(dq.as<float>(), dout.as<float>(), a.n_tokens, a.n_heads, a.n_kv_heads, a.head_dim, a.scale,
                     features, tables, kv_f16, dkp.data(), dvp.data(), st, partials.data(),
                     tiled ? dtiles.as<int32_t>() : nullptr, tiled ? static_cast<int32_t>(tiles.size() / 2) : 0);
    TROUPE_CUDA_TRY_STATUS(download(a.out, dout, q_bytes, st));
    TROUPE_CUDA_TRY_STATUS(download(a.k_pool, dkp, pool_bytes, st));
    TROUPE_CUDA_TRY_STATUS(download(a.v_pool, dvp, pool_bytes, st));
    return finish(*ctx);
}

const char* test_mla_attention(troupe_cuda_context* ctx, const troupe_cuda_mla_attention_args* args) {
    const troupe_cuda_mla_attention_args& a = *args;
    if (a.struct_size != sizeof a)
        return fail("latent attention arguments of %u bytes, expected %zu", a.struct_size, sizeof a);
    const int32_t width = a.kv_lora_rank + a.rope_dim;
    if (a.n_heads < 1 || a.kv_lora_rank < 1 || a.rope_dim < 2 || a.rope_dim % 2 != 0 || a.qk_nope < 0 || a.v_dim < 1 ||
        width > mla_max_latent || !a.wkv_b || !a.rope_freq || !a.rope_ramp || !(a.yarn_factor > 0.0f))
        return fail(
            "latent attention shape: %d heads, kv_lora_rank %d + rope_dim %d (even, at most %d together), "
            "qk_nope %d, v_dim %d, YaRN factor %g%s",
            a.n_heads, a.kv_lora_rank, a.rope_dim, mla_max_latent, a.qk_nope, a.v_dim, a.yarn_factor,
            a.wkv_b && a.rope_freq && a.rope_ramp ? "" : ", and a missing attn_kv_b or RoPE table");
    const troupe_cuda_matrix& w = *a.wkv_b;
    if (w.n_in != a.kv_lora_rank || w.n_out != static_cast<int64_t>(a.n_heads) * (a.qk_nope + a.v_dim))
        return fail("attn_kv_b has shape [%lld, %lld] (n_out, n_in), expected [%d, %d]",
                    static_cast<long long>(w.n_out), static_cast<long long>(w.n_in), a.n_heads * (a.qk_nope + a.v_dim),
                    a.kv_lora_rank);
    if (a.kv_type != TROUPE_CUDA_F32 && a.kv_type != TROUPE_CUDA_F16)
        return fail("KV cache type %s: F32 or F16", type_name(a.kv_type));
    if (a.rows) {
        TROUPE_CUDA_TRY_STATUS(check_tree_call({a.rows, a.mask_base, a.mask, a.mask_words}, a.n_tokens, a.seq_of,
                                               a.block_table_offsets, a.block_size));
    }
    TROUPE_CUDA_TRY_STATUS(check_test_tables(a.n_tokens, a.positions, a.seq_of, a.n_seqs, a.block_table_offsets,
                                             a.block_tables, a.block_size, a.n_blocks));
    TROUPE_CUDA_TRY_STATUS(begin_lane(*ctx, 0));
    cudaStream_t st = ctx->streams[0];
    const size_t f = sizeof(float), heads = a.n_heads, n = a.n_tokens;
    const size_t q_bytes = n * heads * (a.qk_nope + a.rope_dim) * f, latent_bytes = n * width * f;
    const size_t pool_bytes =
        static_cast<size_t>(a.n_blocks) * a.block_size * width * (a.kv_type == TROUPE_CUDA_F16 ? 2 : 4);
    const size_t pairs = a.rope_dim / 2;
    device_buffer dq, dlat, dnorm, dfreq, dramp, dpool, dqlat, dolat, dout, dw;
    TROUPE_CUDA_TRY_STATUS(upload(a.q, q_bytes, dq, "q", st));
    TROUPE_CUDA_TRY_STATUS(upload(a.latent, latent_bytes, dlat, "latent", st));
    TROUPE_CUDA_TRY_STATUS(upload(a.kv_a_norm, a.kv_lora_rank * f, dnorm, "kv_a_norm", st));
    TROUPE_CUDA_TRY_STATUS(upload(a.rope_freq, pairs * f, dfreq, "rope_freq", st));
    TROUPE_CUDA_TRY_STATUS(upload(a.rope_ramp, pairs * f, dramp, "rope_ramp", st));
    TROUPE_CUDA_TRY_STATUS(upload(a.pool, pool_bytes, dpool, "pool", st));
    device_matrix wkv_b;
    TROUPE_CUDA_TRY_STATUS(upload_matrix(w, "attn_kv_b", dw, wkv_b, st));
    TROUPE_CUDA_TRY_STATUS(dqlat.allocate(n * heads * width * f, "q_lat"));
    TROUPE_CUDA_TRY_STATUS(dolat.allocate(n * heads * a.kv_lora_rank * f, "o_lat"));
    TROUPE_CUDA_TRY_STATUS(dout.allocate(n * heads * a.v_dim * f, "out"));
    test_tables tt;
    TROUPE_CUDA_TRY_STATUS(tt.upload_all(a.n_tokens, a.positions, a.seq_of, a.n_seqs, a.block_table_offsets,
                                         a.block_tables, a.block_size, a.rows, a.mask_base, a.mask, a.mask_words, st));
    const mla_dims d{a.n_heads, a.kv_lora_rank, a.qk_nope, a.rope_dim, a.v_dim};
    const bool kv_f16 = a.kv_type == TROUPE_CUDA_F16;
    const auto type = static_cast<dtype>(wkv_b.type);
    launch_mla_prepare(dq.as<float>(), dlat.as<float>(), a.n_tokens, d, dnorm.as<float>(), a.eps,
                       mla_rope{dfreq.as<float>(), dramp.as<float>(), a.yarn_factor}, tt.tables, kv_f16, dpool.data(),
                       st);
    launch_mla_absorb(dq.as<float>(), type, wkv_b.data, a.n_tokens, d, dqlat.as<float>(), st);
    device_buffer partials;  // the split decode's records, as a model step has them
    TROUPE_CUDA_TRY_STATUS(partials.allocate(mla_split_scratch_bytes, "split latent attention"));
    launch_mla_attend(dqlat.as<float>(), dolat.as<float>(), a.n_tokens, d, a.scale, tt.tables, kv_f16, dpool.data(),
                      partials.as<float>(), st);
    launch_mla_expand(dolat.as<float>(), type, wkv_b.data, a.n_tokens, d, dout.as<float>(), st);
    TROUPE_CUDA_TRY(cudaGetLastError());
    TROUPE_CUDA_TRY_STATUS(download(a.out, dout, n * heads * a.v_dim * f, st));
    TROUPE_CUDA_TRY_STATUS(download(a.pool, dpool, pool_bytes, st));
    return finish(*ctx);
}

}  // namespace troupe::cuda
