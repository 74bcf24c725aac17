// kv_layout: one layer's KV memory as the host sizes it, and the one function that turns a layout and a memory
// budget into the pool (kv.memory -> blocks). Two kinds of layout share it:
//
//   built-in (the attention plugin's cache, kv.dtype f32 / f16): K and V rows of n_kv_heads * head_dim elements,
//            bytes_per_token = 2 * kv_width * element bytes, nothing per block, no window;
//   declared (a KV plugin, kv.plugin; plugins/include/troupe/kv.h): whatever it says, e.g. kv/int8's codes and
//            per-token scales per token, per-channel scales per block, a float window for its open blocks.
//
//   block_bytes = round_up(block_size * bytes_per_token + bytes_per_block, 64)     per layer
//   windows     = n_layers * max_seqs * window_tokens * window_bytes_per_token    (taken from the budget first)
//   n_blocks    = (budget - windows) / (layers_per_block * block_bytes), capped at 4 x what max_seqs full contexts
//                 need
//
// With sliding-window layers whose blocks are released (kv_groups.h: a block table per group of layers, the groups
// sharing memory slots), a block holds layers_per_block (the largest group's) layers, and a full context needs
// ceil(n_ctx / block_size) blocks in a global group but min(that, ceil(window / block_size) + 1) in a windowed one.
// Without groups: one global group, layers_per_block = n_layers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/model/ops.h"
#include "core/result.h"

namespace troupe {

struct kv_layout {
    std::string name;                   // "f32", "f16" (built-in) or the plugin's label ("kv/int8")
    size_t bytes_per_token = 0;         // per layer: K and V of one token, per-token scales included
    size_t bytes_per_block = 0;         // per layer: per-block metadata (per-channel scales, zero points)
    int32_t window_tokens = 0;          // per sequence and layer, outside the blocks; 0: no window
    size_t window_bytes_per_token = 0;  // bytes per window token

    size_t block_bytes(int32_t block_size) const {
        return (static_cast<size_t>(block_size) * bytes_per_token + bytes_per_block + 63) / 64 * 64;
    }
    size_t window_slot_bytes() const { return static_cast<size_t>(window_tokens) * window_bytes_per_token; }
    // Bytes per token per layer with the block's metadata (and rounding) spread over its tokens.
    double bytes_per_token_in_blocks(int32_t block_size) const {
        return static_cast<double>(block_bytes(block_size)) / block_size;
    }
};

// The attention plugin's cache: rows of kv_width elements of kv.dtype for K and for V.
kv_layout builtin_kv_layout(int32_t kv_width, kv_dtype type);

struct kv_sizing_inputs {
    int32_t n_layers = 0;
    int32_t block_size = 0;
    int32_t n_ctx = 0;     // the model's context: a full context is ceil(n_ctx / block_size) blocks
    int32_t max_seqs = 0;  // sequences running at once: window slots, and the cap on blocks
    uint64_t budget = 0;   // kv.memory in bytes
    // KV groups (kv_groups.h): layers' worth of memory per block (0: n_layers) and each group's sliding window
    // (0: global; empty: one global group).
    int32_t layers_per_block = 0;
    std::vector<int32_t> group_windows = {};
};

// Blocks one sequence of n_tokens positions holds at once when it decodes: a global group's whole context, a
// windowed group's window plus the block it starts inside (no more than the context), summed over the groups.
int64_t kv_blocks_per_sequence(int32_t n_tokens, int32_t block_size, const std::vector<int32_t>& group_windows);

struct kv_sizing {
    int32_t n_blocks = 0;
    size_t block_bytes = 0;      // per layer
    uint64_t pool_bytes = 0;     // every layer's blocks
    uint64_t window_bytes = 0;   // every layer's window slots
    int64_t tokens = 0;          // n_blocks * block_size
    int64_t full_contexts = 0;   // n_blocks / blocks of one full context
    int64_t blocks_per_seq = 0;  // blocks one sequence at full context holds (every group)
    uint64_t seq_bytes = 0;      // their bytes
    double bytes_per_token = 0;  // all layers, blocks' metadata included
    std::string summary;         // "KV pool (kv/int8, 140.0 B/token/layer): 1024 blocks of 16 tokens (...)"
};

// The pool for `layout` in the budget. Fails, naming the numbers, when the budget holds less than one full context
// (require_full_context) or not even one block; otherwise n_blocks >= 1.
result<kv_sizing> size_kv_cache(const kv_layout& layout, const kv_sizing_inputs& in, bool require_full_context);

}  // namespace troupe
