// The per-token kernels' passes shared by several tokens of one sequence (token_groups.h): a speculative step's last
// accepted token and its drafts read the prefix rows they all see once (attend_groups), and past split_min_keys keys
// compute the parts inside that prefix once for all of them (attend_parts' shared parts, key_split.h). Each row takes
// the operations attention_online.h's one-token pass takes, in the same order, so a token's output is the same bit for
// bit whether it comes alone or in a group (test_attention_batch_invariance). Instantiated once per instruction set by
// the file that includes it, with internal linkage, as attention_online.h.
#pragma once

#include "attention_online.h"

namespace troupe::gqa {
namespace {

// The running state of a pass's query rows: one token's rows, or several tokens' (token-major, n_rows each), each row
// with its running max m, its sum (l, or lsum's 16 lanes for the whole-head kernels), this chunk's scores sc and its
// accumulator (acc: [rows, head_dim]).
struct pass_state {
    float m[rows_per_pass];
    float l[rows_per_pass];
    alignas(64) float sc[rows_per_pass][chunk];    // this chunk's scores, then their weights
    alignas(64) float lsum[rows_per_pass][chunk];  // by_head: each row's sum, in lanes
    float* acc;

    void start(int32_t n_rows, int32_t hd) {
        for (int32_t r = 0; r < n_rows; ++r) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
            for (int32_t i = 0; i < chunk; ++i) lsum[r][i] = 0.0f;
        }
        for (int32_t i = 0; i < n_rows * hd; ++i) acc[i] = 0.0f;
    }
};

// Query rows [r0, r0 + n_rows) (kv heads r0 / group.. with `group` rows each, as in call.q) of n_tok tokens, whose
// query rows start at q[i], over the n_keys keys that `at` walks; token i's rows are st's rows base + i * n_rows ..
// attend_rows' chunk loop (attention_online.h) for several tokens at once: the tokens share each chunk's K/V rows
// (loaded from memory once, and for the whole-head kernels transposed once), while each row takes the same operations
// in the same order as it would alone, so a row's result does not depend on which rows or tokens share its pass.
// `many`: whether n_tok may exceed 1 (the one-token instantiation, for a group's per-token rests, keeps no token loop).
template <class isa, class T, bool many, class cursor>
void pass_keys(const troupe_attention_call& call, const float* const* q, int32_t tokens, int32_t r0, int32_t n_rows,
               pass_state& st, int32_t base, cursor at, int32_t n_keys) {
    const int32_t n_tok = many ? tokens : 1;
    const T* k_pool = reinterpret_cast<const T*>(call.k_pool);
    const T* v_pool = reinterpret_cast<const T*>(call.v_pool);
    const int32_t group = call.n_heads / call.n_kv_heads;
    const int32_t hd = call.head_dim;
    const bool by_head = whole_heads(call);
    const int32_t h_first = r0 / group;
    const int32_t h_last = (r0 + n_rows - 1) / group;
    // The stretch of a position's row this pass reads, for the prefetches.
    const size_t span_begin = static_cast<size_t>(h_first) * hd;
    const size_t span_bytes = static_cast<size_t>(h_last - h_first + 1) * hd * sizeof(T);
    const float softcap = call.softcap;
    float* __restrict m = st.m + base;
    float* __restrict l = st.l + base;
    float(*__restrict sc)[chunk] = st.sc + base;
    float(*__restrict lsum)[chunk] = st.lsum + base;
    float* __restrict acc = st.acc + static_cast<size_t>(base) * hd;
    const int32_t all_rows = n_tok * n_rows;
    // Prefetches run one chunk ahead: the next chunk's rows are requested while this one's are computed.
    chunk_walk<cursor> walk(at, n_keys);
    const size_t* offsets = walk.offsets;
    const size_t* ahead_offsets = walk.ahead_offsets;
    const T* rows[chunk];
    // Where the instruction set has them, whole-head kernels (isa::head_kernels) for a GQA group's query rows: the
    // chunk's K transposed once and shared by the group's rows, scores in vectors, the softmax's sums kept in lanes.
    // 1B shape (32 heads, 4 kv heads, head_dim 64), F16 pools, one thread (bench_verify_attention 4096|65536 1 32 4 1
    // f16): 0.31 against 0.66 ms at 4096 keys (in cache), 6.4 against 12.7 ms at 65536 (from DRAM).
    alignas(64) float kt[isa::head_kernels ? max_head_dim * chunk : 1];  // [head_dim][chunk] K, transposed
    for (int32_t j0 = 0; j0 < n_keys; j0 += chunk) {
        const int32_t n = walk.load(j0);
        const int32_t n_ahead = walk.n_ahead;  // the next chunk's keys, whose rows are prefetched
        // The by_head kernels prefetch a slice of the next chunk's rows with each kv head's work on this one, so that
        // the requests are spread over the chunk (a burst of every row of the next chunk stalled once the miss buffers
        // were full) and still come in address order (prefetch_chunk_slice).
        if (!by_head) prefetch_chunk_spans(k_pool, v_pool, ahead_offsets, n_ahead, span_begin, span_bytes);

        // Scores a kv head at a time: each of its query rows' n dot products together (dots: one reduction for the
        // chunk, not one per key).
        for (int32_t h = h_first; h <= h_last; ++h) {
            const auto [rb, re] = head_rows(h, group, r0, n_rows);
            chunk_rows(k_pool, offsets, n, static_cast<size_t>(h) * hd, rows);
            if constexpr (isa::head_kernels) {
                if (by_head) {
                    prefetch_chunk_slice(k_pool, ahead_offsets, n_ahead, span_begin, span_bytes, h - h_first,
                                         h_last - h_first + 1);
                    isa::transpose_chunk(rows, hd, kt);
                    for (int32_t i = 0; i < n_tok; ++i) {
                        isa::head_scores(q[i] + static_cast<size_t>(rb) * hd, re - rb, kt, hd, call.scale,
                                         sc + i * n_rows + rb);
                    }
                    continue;
                }
            }
            for (int32_t i = 0; i < n_tok; ++i) {
                for (int32_t r = rb; r < re; ++r) {
                    isa::dots(q[i] + static_cast<size_t>(r) * hd, rows, hd, call.scale, sc[i * n_rows + r]);
                }
            }
        }
        if (softcap > 0.0f) cap_scores(sc[0], chunk, all_rows, n, softcap);  // Gemma 2: before the max
        if constexpr (isa::head_kernels) {
            if (by_head) {
                isa::head_softmax(sc, all_rows, n, m, lsum, acc, hd);
            } else {
                chunk_softmax<isa>(sc, all_rows, n, m, l, acc, hd);
            }
        } else {
            chunk_softmax<isa>(sc, all_rows, n, m, l, acc, hd);
        }
        for (int32_t h = h_first; h <= h_last; ++h) {
            const auto [rb, re] = head_rows(h, group, r0, n_rows);
            chunk_rows(v_pool, offsets, n, static_cast<size_t>(h) * hd, rows);
            if constexpr (isa::head_kernels) {
                if (by_head) {
                    prefetch_chunk_slice(v_pool, ahead_offsets, n_ahead, span_begin, span_bytes, h - h_first,
                                         h_last - h_first + 1);
                    for (int32_t i = 0; i < n_tok; ++i) {
                        const int32_t r = i * n_rows + rb;
                        isa::head_accumulate(acc + static_cast<size_t>(r) * hd, re - rb, sc + r, rows, n, hd);
                    }
                    continue;
                }
            }
            for (int32_t i = 0; i < n_tok; ++i) {
                for (int32_t r = i * n_rows + rb; r < i * n_rows + re; ++r) {
                    isa::accumulate(acc + static_cast<size_t>(r) * hd, sc[r], rows, n, hd);
                }
            }
        }
    }
}

// Rows [base, base + n_rows) of st out to dst (acc / l, and each row's max and sum for a part of a split key range).
template <class isa>
void finish_pass(const troupe_attention_call& call, pass_state& st, int32_t base, int32_t n_rows, rows_out dst) {
    if constexpr (isa::head_kernels) {
        if (whole_heads(call)) {
            for (int32_t r = base; r < base + n_rows; ++r) st.l[r] = isa::sum_of(st.lsum[r], chunk);
        }
    }
    finish_rows<isa>(dst, st.acc + static_cast<size_t>(base) * call.head_dim, st.m + base, st.l + base, n_rows,
                     call.head_dim);
}

// Tokens toks[0 .. n_tok) of one sequence with the same first key (token_groups.h: a speculative step's last accepted
// token and its drafts), their query heads of kv heads [h0, h1): the whole chunks of the prefix rows they all see in
// one pass for all of them (each chunk's K/V rows read once for every token, not once per token), then each token's
// rest (its further prefix rows and its extra rows) alone, continuing its rows' state. The chunks start at the keys a
// one-token call's do and each row takes the same operations in the same order, so a token's output is attend_token's
// bit for bit. 110M shape (12 heads, MHA), F32, 256 keys, a chain of 3 drafts, one thread (bench_verify_attention 256 4
// 12 12 1): the step's 4 tokens cost 3.97x one decode before, each re-reading the prefix.
template <class isa, class T>
void attend_group(const troupe_attention_call& call, const int32_t* toks, int32_t n_tok, int32_t h0, int32_t h1) {
    const int32_t group = call.n_heads / call.n_kv_heads;
    const int32_t hd = call.head_dim;
    const int32_t t0 = toks[0];
    const int32_t first = first_key(call, t0);
    int32_t n_common = prefix_rows(call, t0) - first;  // the prefix rows every token sees
    for (int32_t i = 1; i < n_tok; ++i) {
        const int32_t n = prefix_rows(call, toks[i]) - first;
        n_common = n < n_common ? n : n_common;
    }
    const int32_t n_shared = n_common / chunk * chunk;
    const int32_t heads_per_pass = n_tok <= rows_per_pass ? pass_rows(hd) / (n_tok * group) : 0;
    if (n_tok == 1 || n_shared == 0 || heads_per_pass == 0 || rows_in_lanes<isa>(call, h0 * group, group)) {
        for (int32_t i = 0; i < n_tok; ++i) attend_token<isa, T>(call, toks[i], h0, h1);
        return;
    }
    alignas(64) float acc[acc_floats];  // [tokens x rows, head_dim]
    pass_state st;
    st.acc = acc;
    const int32_t bs = call.block_size;
    const int32_t* table = call.block_tables[call.seq_of[t0]];
    const size_t row_elements = static_cast<size_t>(call.n_kv_heads) * hd;
    const position_cursor prefix{table, bs, row_elements, first / bs, first % bs};
    const position_cursor rest{table, bs, row_elements, (first + n_shared) / bs, (first + n_shared) % bs};
    for (int32_t ha = h0; ha < h1; ha += heads_per_pass) {
        const int32_t r0 = ha * group;
        const int32_t n_rows = (h1 - ha < heads_per_pass ? h1 - ha : heads_per_pass) * group;
        const float* q[rows_per_pass];
        for (int32_t i = 0; i < n_tok; ++i) q[i] = call.q + (static_cast<size_t>(toks[i]) * call.n_heads + r0) * hd;
        st.start(n_tok * n_rows, hd);
        pass_keys<isa, T, true>(call, q, n_tok, r0, n_rows, st, 0, prefix, n_shared);
        for (int32_t i = 0; i < n_tok; ++i) {
            const int32_t t = toks[i];
            int32_t all_extra[max_extra_rows];
            const int32_t skip = skipped_extra(call, t);
            const int32_t n_extra = extra_rows(call, t, all_extra) - skip;
            const int32_t n_rest = prefix_rows(call, t) - first - n_shared;
            pass_keys<isa, T, false>(call, &q[i], 1, r0, n_rows, st, i * n_rows,
                                     tree_cursor{rest, n_rest, all_extra + skip}, n_rest + n_extra);
            const rows_out dst{call.out + (static_cast<size_t>(t) * call.n_heads + r0) * hd, nullptr, nullptr};
            finish_pass<isa>(call, st, i * n_rows, n_rows, dst);
        }
    }
}

// Items [begin, end), item = g * n_kv_heads + kv_head for the call's token groups (token_groups.h; a group's tokens are
// tokens[groups[g].first ..]): each group's run of consecutive items is one attend_group.
template <class isa, class T>
void attend_groups(const troupe_attention_call& call, const token_group* groups, const int32_t* tokens, int64_t begin,
                   int64_t end) {
    int64_t item = begin;
    while (item < end) {
        const int64_t g = item / call.n_kv_heads;
        const int64_t run_end = (g + 1) * call.n_kv_heads < end ? (g + 1) * call.n_kv_heads : end;
        attend_group<isa, T>(call, tokens + groups[g].first, groups[g].n_tokens,
                             static_cast<int32_t>(item - g * call.n_kv_heads),
                             static_cast<int32_t>(run_end - g * call.n_kv_heads));
        item = run_end;
    }
}

// A shared part (key_split.h): keys [k0, k0 + n_keys), prefix rows of all of tokens toks[0 .. n_tok) (one sequence),
// every query head of each; token i's normalized rows go to out + i * n_heads * head_dim and its heads' maxes and sums
// to m + i * n_heads, l + i * n_heads. The tokens share each chunk's K/V (pass_keys); each row's result is what
// attend_part computes for its token alone, bit for bit. Where a pass would take the in-lanes kernels (AVX2, groups of
// 8) the tokens take attend_part one by one, which is what a decode does there.
template <class isa, class T>
void attend_shared_part(const troupe_attention_call& call, const int32_t* toks, int32_t n_tok, int32_t k0,
                        int32_t n_keys, float* out, float* m, float* l, float* acc) {
    const int32_t group = call.n_heads / call.n_kv_heads;
    const int32_t hd = call.head_dim;
    const size_t head_floats = static_cast<size_t>(call.n_heads) * hd;
    const int32_t bs = call.block_size;
    const position_cursor keys{call.block_tables[call.seq_of[toks[0]]], bs, static_cast<size_t>(call.n_kv_heads) * hd,
                               k0 / bs, k0 % bs};
    const int32_t heads_per_pass = n_tok <= rows_per_pass ? pass_rows(hd) / (n_tok * group) : 0;
    if (heads_per_pass == 0 || rows_in_lanes<isa>(call, 0, group)) {
        for (int32_t i = 0; i < n_tok; ++i) {
            attend_part<isa, T>(call, toks[i], keys, n_keys, out + i * head_floats, m + i * call.n_heads,
                                l + i * call.n_heads, acc);
        }
        return;
    }
    pass_state st;
    st.acc = acc;
    for (int32_t ha = 0; ha < call.n_kv_heads; ha += heads_per_pass) {
        const int32_t r0 = ha * group;
        const int32_t n_rows = (call.n_kv_heads - ha < heads_per_pass ? call.n_kv_heads - ha : heads_per_pass) * group;
        const float* q[rows_per_pass];
        for (int32_t i = 0; i < n_tok; ++i) q[i] = call.q + (static_cast<size_t>(toks[i]) * call.n_heads + r0) * hd;
        st.start(n_tok * n_rows, hd);
        pass_keys<isa, T, true>(call, q, n_tok, r0, n_rows, st, 0, keys, n_keys);
        for (int32_t i = 0; i < n_tok; ++i) {
            const size_t at = static_cast<size_t>(i) * call.n_heads + r0;
            finish_pass<isa>(call, st, i * n_rows, n_rows, rows_out{out + at * hd, m + at, l + at});
        }
    }
}

// Parts [begin, end) of split tokens (key_split.h): part i is keys [k0, k1) of its token (or of its tokens,
// shared_tokens[token ..], for a shared part), every query head; its normalized rows go to part_out's slots
// ([slot, n_heads, head_dim], one slot per token) and each head's max and sum to part_m, part_l ([slot, n_heads]), for
// merge_key_parts. A plainly causal token's keys are the rows at those positions; a tree token's are its prefix rows,
// then its ancestors' (attention_kernels.h), the part starting at its (k0 - first position)-th key.
template <class isa, class T>
void attend_parts(const troupe_attention_call& call, const key_part* parts, const int32_t* shared_tokens,
                  float* part_out, float* part_m, float* part_l, int64_t begin, int64_t end) {
    const size_t head_floats = static_cast<size_t>(call.n_heads) * call.head_dim;
    alignas(64) float acc[acc_floats];  // [rows, head_dim]
    for (int64_t i = begin; i < end; ++i) {
        const key_part& part = parts[i];
        float* out = part_out + static_cast<size_t>(part.slot) * head_floats;
        float* m = part_m + static_cast<size_t>(part.slot) * call.n_heads;
        float* l = part_l + static_cast<size_t>(part.slot) * call.n_heads;
        if (part.n_tokens > 1) {
            attend_shared_part<isa, T>(call, shared_tokens + part.token, part.n_tokens, part.k0, part.k1 - part.k0, out,
                                       m, l, acc);
            continue;
        }
        const int32_t t = part.token;
        const int32_t* table = call.block_tables[call.seq_of[t]];
        const size_t row_elements = static_cast<size_t>(call.n_kv_heads) * call.head_dim;
        if (plain_causal(call, t)) {
            const position_cursor rows{table, call.block_size, row_elements, part.k0 / call.block_size,
                                       part.k0 % call.block_size};
            attend_part<isa, T>(call, t, rows, part.k1 - part.k0, out, m, l, acc);
            continue;
        }
        int32_t all_extra[max_extra_rows];
        (void)extra_rows(call, t, all_extra);
        const int32_t first = first_key(call, t);
        const int32_t n_prefix = prefix_rows(call, t) - first;
        const int32_t skip_to = part.k0 - (call.positions[t] + 1 - key_count(call, t));  // keys before the part
        const int32_t row0 = first + (skip_to < n_prefix ? skip_to : n_prefix);
        const position_cursor rows{table, call.block_size, row_elements, row0 / call.block_size,
                                   row0 % call.block_size};
        const tree_cursor keys{rows, n_prefix, all_extra + skipped_extra(call, t), skip_to};
        attend_part<isa, T>(call, t, keys, part.k1 - part.k0, out, m, l, acc);
    }
}

}  // namespace
}  // namespace troupe::gqa
