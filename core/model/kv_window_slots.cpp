#include "core/model/kv_window_slots.h"

#include <algorithm>
#include <string>

namespace troupe {

kv_window_slots::kv_window_slots(int32_t n_slots)
    : owner_(static_cast<size_t>(n_slots), -1), last_used_(static_cast<size_t>(n_slots), 0) {
    TROUPE_ASSERT(n_slots > 0, "kv_window_slots needs at least one slot");
}

status kv_window_slots::assign(std::span<const int64_t> seq_ids, std::span<const int32_t> pos0, int32_t block_size,
                               std::vector<int32_t>& slots, std::vector<int32_t>& to_zero) {
    TROUPE_ASSERT(seq_ids.size() == pos0.size(), "one start position per sequence");
    if (seq_ids.size() > owner_.size()) {
        return make_error("a step of " + std::to_string(seq_ids.size()) +
                          " sequences needs more KV window slots than the " + std::to_string(owner_.size()) +
                          " made for scheduler.max_running_seqs");
    }
    ++step_;
    slots.assign(seq_ids.size(), -1);
    to_zero.clear();
    // Sequences that hold a slot keep it (and mark it used by this step, so it is not taken below).
    for (size_t i = 0; i < seq_ids.size(); ++i) {
        if (auto it = slot_of_.find(seq_ids[i]); it != slot_of_.end()) {
            slots[i] = it->second;
            last_used_[static_cast<size_t>(it->second)] = step_;
            if (pos0[i] == 0) to_zero.push_back(it->second);
        }
    }
    for (size_t i = 0; i < seq_ids.size(); ++i) {
        if (slots[i] >= 0) continue;
        if (pos0[i] % block_size != 0) {
            return make_error("sequence " + std::to_string(seq_ids[i]) + " resumes at position " +
                              std::to_string(pos0[i]) + ", inside a block, without its KV window (its slot was taken)");
        }
        // A free slot, else the least recently used one.
        size_t best = 0;
        for (size_t s = 0; s < owner_.size(); ++s) {
            const bool free = owner_[s] < 0;
            if (free) {
                best = s;
                break;
            }
            if (last_used_[s] < last_used_[best]) best = s;
        }
        TROUPE_ASSERT(owner_[best] < 0 || last_used_[best] < step_, "a slot of this step taken over");
        if (owner_[best] >= 0) slot_of_.erase(owner_[best]);
        owner_[best] = seq_ids[i];
        last_used_[best] = step_;
        slot_of_[seq_ids[i]] = static_cast<int32_t>(best);
        slots[i] = static_cast<int32_t>(best);
        to_zero.push_back(static_cast<int32_t>(best));
    }
    return status::success();
}

void kv_window_slots::release(int64_t seq_id) {
    auto it = slot_of_.find(seq_id);
    if (it == slot_of_.end()) return;
    owner_[static_cast<size_t>(it->second)] = -1;
    last_used_[static_cast<size_t>(it->second)] = 0;
    slot_of_.erase(it);
}

}  // namespace troupe
