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
//   token at position 4100:  keys 0 .. 4100 -> parts [0, 256) [256, 512) ... [3840, 4096) [4096, 4101)
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

// Keys [k0, k1) of call token `token`, or of n_tokens tokens at once (a shared part: keys that are prefix rows of all
// of them, token_groups.h), whose results go to the output slots slot .. slot + n_tokens - 1.
struct key_part {
    int32_t token;  // the call token; for a shared part, the index of its first token in the shared-token list
    int32_t k0;
    int32_t k1;
    int32_t slot = 0;
    int32_t n_tokens = 1;
};

// Keys per part, and the fewest keys a token needs to be split (below, the merge costs more than it saves).
constexpr int32_t split_part_keys = 256;
constexpr int32_t split_min_keys = 2 * split_part_keys;

// How many parts a token with n_keys >= split_min_keys keys has: parts of split_part_keys keys from its first key on,
// the last one holding the rest.
inline int32_t key_part_count(int32_t n_keys) {
    return (n_keys + split_part_keys - 1) / split_part_keys;
}

// Part i (< key_part_count) of token t, which has n_keys keys (attention_kernels.h: key_count): positions
// [first + 256 i, min(first + 256 (i + 1), position + 1)) with first = position + 1 - n_keys. Cut at fixed offsets from
// the first key, so that a token is split the same way in a decode step and in a tree call, and tokens of one
// sequence that see the same first key share their parts inside the prefix rows they all see.
key_part key_part_of(const troupe_attention_call& call, int32_t t, int32_t n_keys, int32_t i);

// Merges a token's parts (their output slots slots[0 .. n), in key order) into token t's rows of call.out.
// part_out: [slots, n_heads, head_dim]; part_m, part_l: [slots, n_heads].
void merge_key_parts(const troupe_attention_call& call, int32_t t, const int32_t* slots, int32_t n,
                     const float* part_out, const float* part_m, const float* part_l);

}  // namespace troupe::gqa
