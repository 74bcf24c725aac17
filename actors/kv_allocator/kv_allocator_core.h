// kv_allocator_core: the KV allocator's pure core (no Asio). It owns the block pool (paged blocks,
// prefix cache) and executes the KV part of each step the scheduler asks for (kv_allocator_msgs.h):
//
//   1. computed, then forks (a choice shares its parent's prompt blocks), then frees;
//   2. decodes, in the scheduler's running order: each gets its pending token (and room for up to
//      its draft cap, budget permitting), after taking its own copy of a block it shares with a fork
//      sibling (copy-on-write: the copy goes in the grant, made by the actor shell's kv_copy_lane);
//      when no block is free the latest running sequence is preempted (recompute: its blocks are
//      freed; swap: they are handed out for a copy to host first) until it fits; a sole sequence
//      that cannot grow fails as too big;
//   3. prefill chunks: min(pending, budget left, what the free blocks hold);
//   4. admissions in FCFS order while blocks and budget last (none after a preemption): a candidate
//      needs blocks for all its tokens plus one (and one per choice that will fork from it, with a
//      running slot each: a parallel-sampling request starts whole or waits); its longest cached prefix (whole blocks,
//      one token left to run) is shared; if the next prompt block is being computed by a sequence in the step in flight
//      it waits one step to share it;
//   5. nothing could run and several sequences hold blocks: preempt the latest and try again.
// The token budget is the scheduler's number; the allocator spends it in the scheduler's order
// because what fits depends on the blocks.
//
// The allocator keeps each running sequence's tokens (sent whole at admission, appended by grows) to
// register its full blocks in the prefix cache as soon as they are planned. When the scheduler plans a
// step while the previous one runs, a sequence's last tokens may not be known yet (kv_grow::n_unknown):
// they hold places at the end of its list and the next grow's append replaces them.
#pragma once

#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "actors/kv_allocator/kv_allocator_msgs.h"
#include "actors/kv_allocator/kv_group_pool.h"

namespace troupe {

struct kv_allocator_params {
    kv_geometry kv{0, 0};
    int32_t n_ctx = 0;  // positions per sequence
    bool prefix_caching = true;
    // model_runner::kv_group_windows(): a block table per group, a windowed group's blocks released as its sequence
    // advances (kv_group_pool). Empty: one table of every position.
    std::vector<int32_t> group_windows = {};
};

class kv_allocator_core {
public:
    explicit kv_allocator_core(kv_allocator_params params);

    kv_step_grant grant(const kv_step_request& r);
    const kv_group_pool& pool() const { return pool_; }
    kv_pool_view view() const;

private:
    struct running_seq {
        int64_t id = 0;
        int32_t n_computed = 0;
        int32_t draft_cap = 0;
    };

    int32_t pending(const running_seq& s) const;
    // Before seq writes position pos: its own copy of the block there if a fork sibling shares it (the copy goes in
    // g). False when no block is free for the copy.
    bool unshare(int64_t seq_id, int32_t pos, kv_step_grant& g);
    void add(running_seq& s, int32_t n_tokens, int32_t max_draft, kv_step_grant& g);
    // Preempts the latest running sequence; it becomes the first admission candidate.
    void preempt_last(std::vector<running_seq>& running, std::deque<kv_admit>& candidates, preemption_mode mode,
                      kv_step_grant& g);
    // One planning pass; false when nothing could run and a preemption asks for another.
    bool pass(const kv_step_request& r, std::vector<running_seq>& running, std::deque<kv_admit>& candidates,
              kv_step_grant& g);

    kv_allocator_params params_;
    kv_group_pool pool_;
    std::unordered_map<int64_t, std::vector<int32_t>> tokens_;  // per sequence with blocks
    std::unordered_map<int64_t, int32_t> n_unknown_;            // of which the last are places (kv_grow)
    // The leading tokens of seq whose values are known.
    std::span<const int32_t> known(int64_t seq_id) const;
};

}  // namespace troupe
