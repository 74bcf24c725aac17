// Query tiles: runs of consecutive tokens of one sequence at consecutive positions (a prefill chunk),
// so that one pass over that sequence's K/V serves all of them. The tiled kernel puts the query heads
// of a tile (tokens x the GQA group's heads) into the 16 lanes of a vector:
//
//   call tokens:  t0 t1 t2 t3 t4 t5      seq_of     0  0  0  1  0  2
//                                        positions  7  8  9  3 10  0
//   tiles:        {t0, 3} {t3, 1} {t4, 1} {t5, 1}   (t4 follows t3, of another sequence: a new tile)
//
// Declarations only (no library templates): the AVX-512 kernel includes this.
#pragma once

#include <troupe/plugin.h>

#include <cstdint>

namespace troupe::gqa {

struct query_tile {
    int32_t first_token;  // index into the call's tokens
    int32_t n_tokens;     // tokens first_token .. first_token + n_tokens - 1, positions consecutive
};

// Writes the call's tiles of at most max_tokens tokens each (a tree call's draft tokens, attention_kernels.h, are
// tiles of one token each, never merged) into tiles[0 .. return value), costliest
// first (tokens times keys read), so that a parallel_for handing out contiguous chunks in order ends
// with the cheap ones and balances. tiles must hold call.n_tokens entries.
int32_t make_query_tiles(const troupe_attention_call& call, int32_t max_tokens, query_tile* tiles);

}  // namespace troupe::gqa
