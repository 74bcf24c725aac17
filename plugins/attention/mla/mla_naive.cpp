#include "mla_naive.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "plugins/common/plugin_support.h"

namespace troupe::mla {
namespace {

using plugin_support::run_parallel;

constexpr int64_t expand_rows = 16;  // rows of attn_kv_b per expansion item (32 KiB of floats at kv_lora_rank 512)

// Rows per chunk: about a million expanded floats (4 MiB), within [16, 1024].
int32_t chunk_rows(const mla_shape& sh) {
    const int64_t per_row = static_cast<int64_t>(sh.n_heads) * sh.kv_b_rows_per_head() + sh.rope_dim;
    return static_cast<int32_t>(std::clamp<int64_t>((int64_t{1} << 20) / per_row, 16, 1024));
}

// One more row than the highest row token t reads.
int32_t rows_read(const mla_step& s, int32_t t, int32_t* extra) {
    const int32_t n_extra = s.extra_rows(t, extra);
    return n_extra > 0 ? std::max(s.n_prefix(t), extra[n_extra - 1] + 1) : s.n_prefix(t);
}

// The tokens of one sequence against rows [r0, r1), whose keys and values are expanded in the scratch.
void attend_chunk(const mla_step& s, const int32_t* seq_tokens, int32_t r0, int32_t r1, naive_scratch& sc,
                  int64_t begin, int64_t end) {
    const mla_shape& sh = s.shape();
    const vec_ops& v = s.vec;
    const int32_t H = sh.n_heads, hd = sh.head_dim(), per_head = sh.kv_b_rows_per_head();
    const size_t state_stride = 2 + static_cast<size_t>(sh.v_dim);
    std::vector<float> scores(static_cast<size_t>(r1 - r0));
    std::vector<int32_t> rows(static_cast<size_t>(r1 - r0));
    int32_t extra[max_extra_rows];
    for (int64_t item = begin; item < end; ++item) {
        const int32_t i = static_cast<int32_t>(item / H), h = static_cast<int32_t>(item % H);
        const int32_t t = seq_tokens[i];
        // The rows of [r0, r1) the token reads: its prefix's, then its mask's.
        int32_t n = 0;
        for (int32_t r = r0; r < std::min(r1, s.n_prefix(t)); ++r) rows[static_cast<size_t>(n++)] = r;
        const int32_t n_extra = s.extra_rows(t, extra);
        for (int32_t k = 0; k < n_extra; ++k) {
            if (extra[k] >= r0 && extra[k] < r1) rows[static_cast<size_t>(n++)] = extra[k];
        }
        if (n == 0) continue;
        const float* q = s.call.q + (static_cast<size_t>(t) * H + h) * hd;
        float block_max = -std::numeric_limits<float>::infinity();
        for (int32_t j = 0; j < n; ++j) {
            const int32_t r = rows[static_cast<size_t>(j)] - r0;
            const float* k_nope = sc.kv.data() + (static_cast<size_t>(r) * H + h) * per_head;
            const float* k_pe = sc.latent.data() + static_cast<size_t>(r) * sh.latent_width() + sh.kv_lora_rank;
            const float score =
                s.call.scale * (v.dot(q, k_nope, sh.qk_nope) + v.dot(q + sh.qk_nope, k_pe, sh.rope_dim));
            scores[static_cast<size_t>(j)] = score;
            block_max = std::max(block_max, score);
        }
        float* st = sc.state.data() + (static_cast<size_t>(i) * H + h) * state_stride;  // m, l, o[v_dim]
        if (block_max > st[0]) {
            const float correction = std::exp(st[0] - block_max);
            st[1] *= correction;
            v.scale(st + 2, correction, sh.v_dim);
            st[0] = block_max;
        }
        for (int32_t j = 0; j < n; ++j) {
            const int32_t r = rows[static_cast<size_t>(j)] - r0;
            const float w = std::exp(scores[static_cast<size_t>(j)] - st[0]);
            st[1] += w;
            v.axpy(st + 2, w, sc.kv.data() + (static_cast<size_t>(r) * H + h) * per_head + sh.qk_nope, sh.v_dim);
        }
    }
}

// The tokens of one sequence (seq_tokens[0..n)), chunk by chunk over the rows they read.
int32_t run_sequence(const mla_step& s, int32_t seq, const int32_t* seq_tokens, int32_t n, naive_scratch& sc,
                     const troupe_parallel* parallel) {
    const mla_shape& sh = s.shape();
    const vec_ops& v = s.vec;
    const int32_t H = sh.n_heads, rank = sh.kv_lora_rank, lw = sh.latent_width(), per_head = sh.kv_b_rows_per_head();
    const size_t state_stride = 2 + static_cast<size_t>(sh.v_dim);
    int32_t extra[max_extra_rows];
    int32_t n_rows = 0;
    for (int32_t i = 0; i < n; ++i) n_rows = std::max(n_rows, rows_read(s, seq_tokens[i], extra));
    sc.state.resize(static_cast<size_t>(n) * H * state_stride);
    for (size_t k = 0; k < static_cast<size_t>(n) * H; ++k) {
        float* st = sc.state.data() + k * state_stride;
        st[0] = -std::numeric_limits<float>::infinity();
        std::fill(st + 1, st + state_stride, 0.0f);
    }
    const int32_t chunk = chunk_rows(sh);
    sc.kv.resize(static_cast<size_t>(chunk) * H * per_head);
    sc.latent.resize(static_cast<size_t>(chunk) * lw);
    for (int32_t r0 = 0; r0 < n_rows; r0 += chunk) {
        const int32_t r1 = std::min(n_rows, r0 + chunk);
        // The chunk's latent rows as floats, then their expansion: items are blocks of attn_kv_b's rows, each applied
        // to every row of the chunk while it stays in cache (the matrix is read once per chunk, not once per row).
        int32_t rc = run_parallel(parallel, r1 - r0, [&](int64_t b, int64_t e) {
            for (int64_t r = b; r < e; ++r) {
                v.load(s.latent_row(seq, r0 + static_cast<int32_t>(r)), s.f16(),
                       sc.latent.data() + static_cast<size_t>(r) * lw, lw);
            }
        });
        if (rc != TROUPE_OK) return rc;
        const int64_t n_out = static_cast<int64_t>(H) * per_head;
        rc = run_parallel(parallel, (n_out + expand_rows - 1) / expand_rows, [&](int64_t b, int64_t e) {
            // The item's rows of attn_kv_b as floats, converted once and applied to every row of the chunk.
            std::vector<float> w(static_cast<size_t>(expand_rows) * rank);  // [expand_rows, rank]
            for (int64_t blk = b; blk < e; ++blk) {
                const int64_t o0 = blk * expand_rows, n_o = std::min<int64_t>(expand_rows, n_out - o0);
                v.load_w(s.model.kv_b_row(s.call.layer, o0), s.model.kv_b_type(), w.data(), n_o * rank);
                for (int32_t r = 0; r < r1 - r0; ++r) {
                    v.gemv(w.data(), rank, n_o, sc.latent.data() + static_cast<size_t>(r) * lw, rank,
                           sc.kv.data() + static_cast<size_t>(r) * n_out + o0);
                }
            }
        });
        if (rc != TROUPE_OK) return rc;
        rc = run_parallel(parallel, static_cast<int64_t>(n) * H,
                          [&](int64_t b, int64_t e) { attend_chunk(s, seq_tokens, r0, r1, sc, b, e); });
        if (rc != TROUPE_OK) return rc;
    }
    for (int32_t i = 0; i < n; ++i) {
        for (int32_t h = 0; h < H; ++h) {
            const float* st = sc.state.data() + (static_cast<size_t>(i) * H + h) * state_stride;
            float* out = s.call.out + (static_cast<size_t>(seq_tokens[i]) * H + h) * sh.v_dim;
            for (int32_t d = 0; d < sh.v_dim; ++d) out[d] = st[2 + d] / st[1];
        }
    }
    return TROUPE_OK;
}

}  // namespace

int32_t run_naive(const mla_step& s, const int32_t* tokens, int32_t n, naive_scratch& scratch,
                  const troupe_parallel* parallel) {
    // Sequences in the order of their first token; each sequence's tokens in call order.
    std::vector<bool> done(static_cast<size_t>(n), false);
    for (int32_t i = 0; i < n; ++i) {
        if (done[static_cast<size_t>(i)]) continue;
        const int32_t seq = s.seq_of(tokens[i]);
        scratch.seq_tokens.clear();
        for (int32_t j = i; j < n; ++j) {
            if (!done[static_cast<size_t>(j)] && s.seq_of(tokens[j]) == seq) {
                scratch.seq_tokens.push_back(tokens[j]);
                done[static_cast<size_t>(j)] = true;
            }
        }
        const int32_t rc = run_sequence(s, seq, scratch.seq_tokens.data(),
                                        static_cast<int32_t>(scratch.seq_tokens.size()), scratch, parallel);
        if (rc != TROUPE_OK) return rc;
    }
    return TROUPE_OK;
}

}  // namespace troupe::mla
