// The window of troupe's quantized KV-cache plugins (kv_driver.h). A format that keeps a sequence's newest
// blocks in float (window_keys / window_values; R = residual_blocks of them) gets, per layer and sequence slot,
// window_tokens = R * block_size + 1 rows of window_bytes_per_token:
//
//   slot: [header row: int32 held[R]: block + 1 that ring entry j holds (0: none; the host zeroes a new slot)]
//         [K: R x n_kv_heads x block_size x head_dim floats]   when window_keys   (ring entry j = block % R)
//         [V: R x n_kv_heads x block_size x head_dim floats]   when window_values
//
// Writes go in position order per sequence. A token at position p (block b = p / block_size, row r) goes to ring
// entry b % R for the parts the format keeps there; when it fills its block (r = block_size - 1) the format
// quantizes the entry's rows into the block ("closes" it), and the entry keeps its floats until block b + R
// takes it. A write into a block its entry does not hold, at r > 0 (a sequence resumed after a rollback of draft
// tokens, or after the ring moved on), first reloads rows [0, r) of that block into the entry, dequantized.
//
// Reads. After a step's writes, with q the sequence's last position, a block b with b > q / block_size - R whose
// entry holds it is read from the window (floats); every other block is full and read from its codes, also by
// the tokens of the step that wrote it (a prefill chunk), as every later step will.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kv_format.h"

namespace troupe::kv {

inline bool has_window(const block_codec& c) {
    return c.window_keys || c.window_values;
}

// One slot's parts (the top comment).
struct window_view {
    int32_t* held = nullptr;  // [R] block + 1 held by each ring entry
    float* k = nullptr;       // [R, n_kv_heads, block_size, head_dim] or null
    float* v = nullptr;
};

// Bytes of one window row: K and/or V of one token, every kv head.
inline size_t window_row_bytes(const kv_geometry& g, const block_codec& codec) {
    return static_cast<size_t>(g.n_kv_heads) * g.head_dim * sizeof(float) *
           ((codec.window_keys ? 1 : 0) + (codec.window_values ? 1 : 0));
}

inline window_view window_of(const kv_geometry& g, const block_codec& codec, void* window, int32_t slot) {
    const int32_t n_res = codec.residual_blocks;
    const size_t head_rows = static_cast<size_t>(n_res) * g.n_kv_heads * g.block_size * g.head_dim;
    const size_t row_bytes = window_row_bytes(g, codec);
    const size_t slot_bytes = row_bytes * (static_cast<size_t>(n_res) * g.block_size + 1);
    auto* base = static_cast<uint8_t*>(window) + static_cast<size_t>(slot) * slot_bytes;
    window_view w;
    w.held = reinterpret_cast<int32_t*>(base);
    float* parts = reinterpret_cast<float*>(base + row_bytes);
    if (codec.window_keys) {
        w.k = parts;
        parts += head_rows;
    }
    if (codec.window_values) w.v = parts;
    return w;
}

}  // namespace troupe::kv
