// kv_cache_op: a KV cache that owns its layout (a KV plugin, kv.plugin; plugins/include/troupe/kv.h), as the model
// graph sees it. The runner asks for the layout once, allocates per layer untyped blocks and window slots from it
// (kv_layout.h), and calls forward() in place of the attention op: write the step's K/V at their positions, then
// causal attention reading the plugin's own format.
//
//   pool:   [n_blocks][block_bytes] per layer; sequence s, position p -> block block_tables[s][p / block_size]
//   window: [n_window_slots][window_tokens * window_bytes_per_token] per layer; window_slot[s] is sequence s's
//           slot, the same at every step of the sequence, zeroed by the runner when the sequence starts
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/model/kv_layout.h"
#include "core/model/ops.h"
#include "core/result.h"

namespace troupe {

struct kv_cache_shape {
    int32_t n_layers;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t block_size;
    int32_t max_seqs;  // window slots
};

struct kv_cache_call {
    int32_t layer;
    int32_t n_tokens;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
    float scale;
    const float* q;            // [n_tokens, n_heads, head_dim], RoPE applied
    const float* k;            // [n_tokens, n_kv_heads, head_dim], RoPE applied
    const float* v;            // [n_tokens, n_kv_heads, head_dim]
    float* out;                // [n_tokens, n_heads, head_dim]
    const int32_t* positions;  // [n_tokens]
    const int32_t* seq_of;     // [n_tokens] index into block_tables
    int32_t n_seqs;
    const int32_t* const* block_tables;  // [n_seqs][blocks of the sequence]
    int32_t block_size;
    void* pool;                  // this layer's blocks
    size_t block_bytes;          // kv_layout::block_bytes(block_size)
    void* window;                // this layer's window slots; null without a window
    const int32_t* window_slot;  // [n_seqs]; null without a window
};

class kv_cache_op {
public:
    virtual ~kv_cache_op() = default;
    virtual std::string name() const = 0;  // "kv/int8"
    // The per-layer layout for this shape (called once per model, before any forward).
    virtual result<kv_layout> layout(const kv_cache_shape& shape) = 0;
    virtual status forward(const kv_cache_call& call, const parallel_for_fn& parallel_for) = 0;
};

}  // namespace troupe
