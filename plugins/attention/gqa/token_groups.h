// Token groups: the per-token tokens of a call (decodes, a speculative step's tokens) of one sequence that attend to
// keys from the same first row on, so that one pass over their common prefix's K/V serves all of them
// (attention_online.h: attend_group). A speculative step verifies its last accepted token and its drafts in one call:
// consecutive positions of a chain, or a tree's nodes that see the rows [first, mask_base) and then their ancestors;
// without groups every token re-reads the whole prefix.
//
//   call tokens:  t0 t1 t2 t3 t4      seq_of      0  0  0  0  1
//                                     positions  40 41 42 43  7     (t0 the last accepted token, t1..t3 drafts)
//   groups:       {t0 t1 t2 t3} {t4}  the group's common prefix: rows 0..39 (its whole chunks: 0..31)
//
// Declarations only (no library templates): the instruction sets' files include it.
#pragma once

#include <troupe/plugin.h>

#include <cstdint>

namespace troupe::gqa {

// tokens[first .. first + n_tokens) of the array the groups were made over.
struct token_group {
    int32_t first;
    int32_t n_tokens;
};

// Reorders tokens[0 .. n) so that the tokens of one sequence with the same first key (attention_kernels.h; 0 without a
// sliding window) are adjacent, and writes their groups of at most max_tokens tokens into groups[0 .. return
// value) (groups must hold n entries), listed in the order of their first tokens in `tokens` as given. Tokens that
// share nothing are groups of one.
int32_t make_token_groups(const troupe_attention_call& call, int32_t* tokens, int32_t n, int32_t max_tokens,
                          token_group* groups);

}  // namespace troupe::gqa
