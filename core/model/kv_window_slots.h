// kv_window_slots: which window slot each running sequence uses, for KV caches that keep per-sequence state outside
// their blocks (kv_cache_op.h's window; e.g. the open block's newest tokens in float).
//
// A sequence gets a slot the first time it appears in a step and keeps it until it is released (the executor
// retires it: model_runner::forget). A slot is handed out zeroed: assign() lists the slots the caller must zero,
// those newly taken and those of sequences that start again at position 0 (recomputed after a preemption). When
// every slot is held, the one least recently used by a step, among sequences not in this step, is taken over; its
// old sequence can come back only at the start of a block (position 0, or after a prefix of whole cached blocks),
// as recompute brings it back: one that comes back inside a block has lost state its blocks do not hold, an error.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/result.h"

namespace troupe {

class kv_window_slots {
public:
    explicit kv_window_slots(int32_t n_slots);

    int32_t n_slots() const { return static_cast<int32_t>(owner_.size()); }
    // slots[i] = the slot of seq_ids[i] (a step's sequences, each once); `to_zero` gets the slots to clear.
    status assign(std::span<const int64_t> seq_ids, std::span<const int32_t> pos0, int32_t block_size,
                  std::vector<int32_t>& slots, std::vector<int32_t>& to_zero);
    void release(int64_t seq_id);

private:
    std::unordered_map<int64_t, int32_t> slot_of_;  // sequence -> slot
    std::vector<int64_t> owner_;                    // [n_slots] sequence holding the slot, -1 when free
    std::vector<uint64_t> last_used_;               // [n_slots] step counter of the slot's last use
    uint64_t step_ = 0;
};

}  // namespace troupe
