// kv_groups: which layers of a model share a KV block table, and where each layer's KV memory lies, when the layers
// attend over different spans (sliding windows; the KV allocator's kv_group_pool keeps one table per group).
//
//   Gemma 2 (26 layers, even ones windowed):  group 0 = global  {1, 3, ..., 25}   window 0
//                                             group 1 = windowed {0, 2, ..., 24}  window 4096
//   a layer's slot is its index in its group: slot 0 holds layers 1 and 0, slot 1 layers 3 and 2, ...
//
// A block id belongs to one group's table, so the layers of different groups can share memory slots: the KV pools
// are [n_slots][n_blocks] instead of [n_layers][n_blocks], and a block id holds one row set per slot (as vLLM's
// hybrid allocator shares KV tensors across groups). With no window, or release off, there is one group of every
// layer with slot = layer: the layout as it always was.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model/llama_hparams.h"
#include "core/model/model_runner.h"
#include "core/result.h"

namespace troupe {

struct kv_groups {
    std::vector<int32_t> windows;   // [n_groups] sliding window of each group (0: every position), the global first
    std::vector<int32_t> group_of;  // [n_layers]
    std::vector<int32_t> slot_of;   // [n_layers] the layer's KV memory slot: its index in its group
    int32_t n_slots = 0;            // layers' worth of KV memory per block: the largest group's size

    int32_t n_groups() const { return static_cast<int32_t>(windows.size()); }
    // One group per distinct window when `release` (and some layer has a window); else one group {0}, slot = layer.
    static kv_groups of(const llama_hparams& hp, bool release);
    // The step's tables of group g (0: block_table, else more_tables[g - 1]).
    static const std::vector<int32_t>& table(const sequence_step& s, int32_t g) {
        return g == 0 ? s.block_table : s.more_tables[static_cast<size_t>(g - 1)];
    }
    // A step's tables: one per group, each covering its positions with blocks of the pool, -1 only where every
    // position of the block lies before the window of the step's first token (a released block no query reads).
    status check(const sequence_step& s, int32_t block_size, int32_t n_blocks) const;
};

}  // namespace troupe
