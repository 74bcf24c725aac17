// Decode attention split over key positions (flash-decoding). A decode step has one token per sequence, so its
// work items (token, kv head) are few, and at a long context each one streams a long run of K/V rows: with few
// sequences the threads idle or each reads a strided slice of every row. Instead a long token's keys are cut into
// parts of consecutive positions (whole rows, all kv heads: one contiguous stretch of the pool per position), the
// parts go to the threads in order (a thread takes a contiguous range of positions), and each part computes, per
// query head, its own softmax over its keys: max m_i, sum l_i = sum exp(s - m_i), and o_i = sum exp(s - m_i) v / l_i.
// The parts are then merged exactly:
//
//   M = max_i m_i,  w_i = exp(m_i - M) * l_i,  out = sum_i w_i * o_i / sum_i w_i
//
//   token at position 4095:  keys 0 .. 4095 -> parts [0, 512) [512, 1024) ... [3584, 4096)
//
// Tokens outside query tiles are split, plainly causal ones (attention_kernels.h: plain_causal) and a tree call's
// drafts alike (a draft's keys: its prefix rows, then its ancestors' rows, numbered by position), with their sliding
// window (the keys are first_key .. position) and soft-capping (per score, inside each part); prefill tiles keep
// their kernel. Declarations only (no library templates): the instruction sets' files include it.
#pragma once

#include <troupe/plugin.h>

#include <cstddef>
#include <cstdint>

namespace troupe::gqa {

// Keys [k0, k1) of call token `token`.
struct key_part {
    int32_t token;
    int32_t k0;
    int32_t k1;
};

// Keys per part, and the fewest keys a token needs to be split (below, the merge costs more than it saves).
constexpr int32_t split_part_keys = 256;
constexpr int32_t split_min_keys = 2 * split_part_keys;

// Appends token t's parts to parts (room for n_keys / split_part_keys + 1) and returns how many: one when it has
// fewer than split_min_keys keys. n_keys: the token's key count (attention_kernels.h: key_count); the parts cover
// positions [position + 1 - n_keys, position + 1), cut by the count alone, so a token is split the same way in a
// decode step and in a tree call.
int32_t split_keys(const troupe_attention_call& call, int32_t t, int32_t n_keys, key_part* parts);

// Merges tokens' parts [first, first + n) (consecutive, of one token) into that token's rows of call.out.
// part_out: [parts, n_heads, head_dim]; part_m, part_l: [parts, n_heads].
void merge_key_parts(const troupe_attention_call& call, const key_part* parts, int32_t first, int32_t n,
                     const float* part_out, const float* part_m, const float* part_l);

}  // namespace troupe::gqa
