// CPU kernels of the gqa attention plugin: MHA (group 1), MQA (one kv head) and GQA in one code path.
//
// The KV cache is paged (plugins/include/troupe/plugin.h, core/model/ops.h):
//
//   k_pool, v_pool: [n_blocks, block_size, n_kv_heads, head_dim] of float32, or of halves (kv_type F16)
//
//        block_tables[s] = {7, 2, 9}          block_size = 4
//        positions 0..3 -> block 7, 4..7 -> block 2, 8..11 -> block 9; row = p % block_size
//
// A step runs in two phases, each split over the host's worker pool:
//   1. write_kv: every token's k and v rows go into the pools at their positions (must finish before
//      any token reads, since a token attends to earlier tokens of the same step);
//   2. attend: one work item per (token, kv head); the item computes the outputs of the query heads
//      that share that kv head (the GQA group), so each K/V row is loaded once per group.
//      With a SIMD kernel the tokens are first grouped into query tiles (query_tiles.h: consecutive tokens
//      of one sequence, a prefill chunk), and a work item is (kv head, tile): each K/V row is then loaded
//      once per tile and group, and the tile's query rows fill the lanes of a vector.
//
// Tree calls (troupe_attention_call.rows, speculative verification): token t writes its K/V at row rows[t] and
// attends to the rows [0, mask_base[t]) plus the rows its mask names (its ancestors in the tree and itself), in
// increasing order of row: the key list of the kernels is that prefix, then those extra rows. Tokens that are
// plainly causal in such a call (row = position, prefix = rows 0..position, no mask bits: a prefill chunk before
// the drafts) still go into query tiles; the others take the per-token kernels.
//
//        rows   0 1 2 3 | 4 5 6 7        mask_base = 4, drafts are rows 4..7, node 3 (row 7) the child of node 1
//        row 7 sees 0 1 2 3 .  5 . 7     mask word of row 7: 0b1010
//
// Sliding window and soft-capping (troupe_attention_call version 4, ops.features): with window w a token at position
// p attends only to positions > p - w: in a causal call the rows first_key(t) .. p; in a tree call the prefix rows
// from first_key(t) on and the extra rows past skipped_extra(t) (the extra rows, ascending, are the token's ancestors
// and itself by depth: the k-th is at position mask_base + k). With softcap c every score s (after scaling) becomes
// c * tanh(s / c) before the softmax.
//
// Kernels: attend_ref is the scalar two-pass reference (scores, max, exp, sum, weighted sum).
// attend_tiles_avx2 and attend_tiles_avx512 use a one-pass online softmax with running max and sum per
// query row: with the query rows of a tile in vector lanes (attention_tiled.h) for prefill chunks, or per token
// and kv head (attention_online.h) for decodes, speculative steps' tokens (verify_tokens_max) and tiles too small to
// fill half the lanes.
#pragma once

#include <troupe/plugin.h>

#include <cstddef>
#include <cstdint>

#include "key_split.h"
#include "query_tiles.h"
#include "token_groups.h"

namespace troupe::gqa {

// Offset in elements of the K/V row of (cache row `pos`, kv head) in the pools of `call`'s sequence table.
// Internal linkage (static): the ISA-specific files include it, and an out-of-line copy built with
// AVX-512 flags must never be the one the linker keeps for the others.
static inline size_t kv_offset(const troupe_attention_call& call, const int32_t* table, int32_t pos, int32_t kv_head) {
    const int32_t block = table[pos / call.block_size];
    const size_t row = static_cast<size_t>(block) * call.block_size + pos % call.block_size;
    return (row * call.n_kv_heads + kv_head) * call.head_dim;
}

// Mask words a tree call may carry (trees of up to 64 * max_mask_words nodes), and so the most extra rows a
// token attends to beyond its prefix.
constexpr int32_t max_mask_words = 16;
constexpr int32_t max_extra_rows = 64 * max_mask_words;

// The cache row token t writes: its position, or rows[t] in a tree call.
static inline int32_t kv_row(const troupe_attention_call& call, int64_t t) {
    return call.rows != nullptr ? call.rows[t] : call.positions[t];
}

// The contiguous rows [0, n) token t attends to first: 0..position, or [0, mask_base[t]) in a tree call.
static inline int32_t prefix_rows(const troupe_attention_call& call, int64_t t) {
    return call.rows != nullptr ? call.mask_base[t] : call.positions[t] + 1;
}

// The rows beyond the prefix token t attends to (its mask bits), ascending, into extra[max_extra_rows]; returns
// how many (0 in a causal call).
static inline int32_t extra_rows(const troupe_attention_call& call, int64_t t, int32_t* extra) {
    if (call.rows == nullptr) return 0;
    int32_t n = 0;
    for (int32_t w = 0; w < call.mask_words; ++w) {
        for (uint64_t bits = call.mask[t * call.mask_words + w]; bits != 0; bits &= bits - 1) {
            extra[n++] = call.mask_base[t] + 64 * w + __builtin_ctzll(bits);
        }
    }
    return n;
}

// The first prefix row token t attends to: 0, or the oldest position inside its window.
static inline int32_t first_key(const troupe_attention_call& call, int64_t t) {
    if (call.window <= 0) return 0;
    const int32_t first = call.positions[t] - call.window + 1;
    const int32_t n_prefix = prefix_rows(call, t);
    return first <= 0 ? 0 : (first < n_prefix ? first : n_prefix);
}

// How many of token t's extra rows (extra_rows, ascending) lie outside its window (0 in a causal call).
static inline int32_t skipped_extra(const troupe_attention_call& call, int64_t t) {
    if (call.window <= 0 || call.rows == nullptr) return 0;
    const int32_t skip = call.positions[t] - call.window + 1 - call.mask_base[t];
    return skip > 0 ? skip : 0;
}

// How many keys token t attends to: its prefix rows from first_key(t) on, then its extra rows inside its window. For a
// tree token this is what a one-token decode at its position counts (position + 1 - first key): its ancestors stand
// at the positions between its prefix and itself.
static inline int32_t key_count(const troupe_attention_call& call, int64_t t) {
    if (call.rows == nullptr) return call.positions[t] + 1 - first_key(call, t);
    int32_t n_extra = 0;
    for (int32_t w = 0; w < call.mask_words; ++w) n_extra += __builtin_popcountll(call.mask[t * call.mask_words + w]);
    return prefix_rows(call, t) - first_key(call, t) + n_extra - skipped_extra(call, t);
}

// Whether token t attends exactly as in a causal call (always, outside tree calls): it writes the row of its
// position, sees rows 0..position and nothing else. Only such tokens go into query tiles.
static inline bool plain_causal(const troupe_attention_call& call, int64_t t) {
    if (call.rows == nullptr) return true;
    if (call.rows[t] != call.positions[t] || call.mask_base[t] != call.positions[t] + 1) return false;
    for (int32_t w = 0; w < call.mask_words; ++w) {
        if (call.mask[t * call.mask_words + w] != 0) return false;
    }
    return true;
}

// Copies tokens [begin, end)'s k and v rows into the pools (converted to halves for kv_type F16): the scalar
// one, and the instruction sets' (kv_write.h; the same halves, vector conversions).
void write_kv(const troupe_attention_call& call, int64_t begin, int64_t end);
void write_kv_avx2(const troupe_attention_call& call, int64_t begin, int64_t end);
void write_kv_avx512(const troupe_attention_call& call, int64_t begin, int64_t end);

// Limits of the SIMD kernels' stack scratch (checked by the plugin before any kernel runs).
constexpr int32_t max_head_dim = 512;
constexpr int32_t heads_per_pass = 8;  // query heads of a group computed together per pass over K/V
constexpr int32_t rows_per_pass = 32;  // per-token kernels: query rows (tokens x kv heads x group) of one pass over K/V
constexpr int32_t max_tiled_head_dim = 256;  // beyond, the tiled kernels hand their tiles to the per-token ones
// Query rows (tokens x group heads) per pass of the tiled kernels: their vectors' lanes.
constexpr int32_t avx2_lanes = 8;
constexpr int32_t avx512_lanes = 16;

// Computes work items [begin, end), item = token * n_kv_heads + kv_head.
void attend_ref(const troupe_attention_call& call, int64_t begin, int64_t end);

// Computes work items [begin, end), item = kv_head * n_tiles + tile index (so one thread's consecutive
// items share a kv head's K/V in its cache). Tiles of lanes / group tokens (at least 1) fill the lanes;
// larger ones are done lanes rows at a time.
void attend_tiles_avx2(const troupe_attention_call& call, const query_tile* tiles, int32_t n_tiles, int64_t begin,
                       int64_t end);
void attend_tiles_avx512(const troupe_attention_call& call, const query_tile* tiles, int32_t n_tiles, int64_t begin,
                         int64_t end);

// Whether the tiled kernels take a tile as a tile: its query rows (tokens x group) fill at least half of the
// lanes and its head dim fits their scratch. The tokens of other tiles go to the per-token kernels.
static inline bool fills_lanes(const query_tile& tile, int32_t group, int32_t head_dim, int32_t lanes) {
    return tile.n_tokens * group >= lanes / 2 && head_dim <= max_tiled_head_dim;
}

// One arithmetic per token, whatever else its call holds. The tiled kernel rounds a query row differently from the
// per-token kernels (q scaled before the product, the dot product in head-dim order, another exponential), so a token
// must take the same kernel whether it comes alone (a decode step) or among the tokens a speculative step verifies
// (a chain of drafts, a tree): a sequence with at most verify_tokens_max plainly causal tokens in a call (a tree's
// drafts are not counted) has each of its tokens computed exactly as a one-token decode at its position would be (the
// per-token kernels, split over positions from split_min_keys keys on, tree tokens included), and only longer runs
// (prefill chunks) take query tiles. Plain and speculative greedy decoding then see the same attention bit for bit; the
// tiled kernel's rows are themselves independent of the other rows of their tile (a masked key adds exactly nothing).
constexpr int32_t verify_tokens_max = 32;

// The per-token kernels (attention_online.h): items [begin, end), item = g * n_kv_heads + kv_head for the call's
// token group g (token_groups.h), group-major, so the kv heads of one group a thread takes are one pass over its
// K/V rows (contiguous per position) for all of the group's tokens.
void attend_groups_avx2(const troupe_attention_call& call, const token_group* groups, const int32_t* tokens,
                        int64_t begin, int64_t end);
void attend_groups_avx512(const troupe_attention_call& call, const token_group* groups, const int32_t* tokens,
                          int64_t begin, int64_t end);

// The split decode's parts [begin, end) (key_split.h; attention_online.h: attend_parts).
void attend_parts_avx2(const troupe_attention_call& call, const key_part* parts, const int32_t* shared_tokens,
                       float* part_out, float* part_m, float* part_l, int64_t begin, int64_t end);
void attend_parts_avx512(const troupe_attention_call& call, const key_part* parts, const int32_t* shared_tokens,
                         float* part_out, float* part_m, float* part_l, int64_t begin, int64_t end);

}  // namespace troupe::gqa
