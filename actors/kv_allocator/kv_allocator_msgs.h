// Messages between the scheduler and the KV allocator actor: one round trip per step.
//
// The scheduler says what it wants this step (kv_step_request): the sequences it dropped since the
// last request (frees), what the forward wrote (computed), its running sequences in admission order
// (grows: the allocator extends them by their pending tokens, decodes first, then prefill chunks),
// and the waiting requests it would admit, in FCFS order, with their tokens for the prefix lookup.
// The allocator applies it atomically to its block pool and answers what it granted (kv_step_grant):
// the block table of every sequence in the step, preemptions, admissions, deferrals and failures, and
// its pool figures for the snapshot. Ids and values only; the token lists travel as shared_ptr<const>.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "actors/scheduler/scheduling_policy.h"
#include "core/runtime/device_stream.h"

namespace troupe {

// The forward wrote positions [0, n_computed) of seq: its registered prefix blocks there are ready.
struct kv_computed {
    int64_t seq_id = 0;
    int32_t n_computed = 0;
};

// A choice of a parallel-sampling request (n > 1, best_of) forks from the sequence that computed its prompt, after
// that sequence's first sample: it shares the parent's blocks covering positions [0, n_tokens) (the prompt), the
// partial last block included, which it copies when it first writes there (copy-on-write).
struct kv_fork {
    int64_t parent_id = 0;
    int64_t child_id = 0;
    int32_t n_tokens = 0;
};

// A running sequence. Pending tokens are its known tokens past n_computed: one is a decode (it may
// also get room for draft tokens), more is a prefill that takes a chunk of the budget.
struct kv_grow {
    int64_t seq_id = 0;
    int32_t n_computed = 0;
    int32_t draft_cap = 0;        // most draft tokens the scheduler allows it this step (0: none)
    std::vector<int32_t> append;  // its tokens the allocator has not been sent yet (sampled since)
    // Planning ahead (a step in flight samples it): tokens after append that exist but are not known yet.
    // They count as pending; the allocator holds their places, registers prefix blocks over known tokens
    // only, and takes the next request's append as their values.
    int32_t n_unknown = 0;
};

// A waiting request, in FCFS order. tokens: every known token (the prompt, then what it generated
// before a preemption); a swapped one comes back from host memory with n_computed rows.
struct kv_admit {
    int64_t seq_id = 0;
    std::shared_ptr<const std::vector<int32_t>> tokens;
    int32_t n_computed = 0;
    bool swapped = false;
    bool no_prefix = false;  // computes every token (its prompt's logprobs are asked for): no prefix-cache hit
    // Choices that will fork from it at its first sample (kv_fork): admitted only when a block for each (its copy of
    // the shared last block, or its next block) and a running slot for each are free too.
    int32_t n_forks = 0;
};

struct kv_step_request {
    static constexpr const char* name = "kv_step_request";
    int64_t step_id = 0;
    std::vector<kv_computed> computed;  // applied first
    std::vector<kv_fork> forks;         // then the forks (before the frees: a parent may end with its first token)
    std::vector<int64_t> frees;         // then these sequences' blocks are dropped
    std::vector<kv_grow> grows;         // the running sequences, admission order
    std::vector<kv_admit> admits;       // admission candidates, FCFS
    int32_t token_budget = 0;           // the step's max_batched_tokens, spent in the order above
    int32_t max_running = 0;            // admissions stop when this many run
    bool may_admit = true;
    bool admit_without_budget = false;                        // the static baseline admits its whole batch at once
    preemption_mode preemption = preemption_mode::recompute;  // swap only where the runner can
    // The id of the last step plan the scheduler sent to the executor (-1: none): a KV copy waits only for steps
    // that were sent (kv_copy_lane.h), so it never waits for a plan that will not run.
    int64_t last_sent_step = -1;
};

// One sequence in the step, in plan order (decodes, prefill chunks, first chunks of admissions).
struct kv_step_seq {
    int64_t seq_id = 0;
    int32_t n_tokens = 0;   // pending tokens granted (from its n_computed)
    int32_t max_draft = 0;  // draft room granted after them
    std::shared_ptr<const std::vector<int32_t>> block_table;
    // KV groups 1.. of a model with sliding-window layers (kv_allocator_params::group_windows); null with one group.
    std::shared_ptr<const std::vector<std::vector<int32_t>>> more_tables = {};
};

// A running sequence the allocator preempted (from the back of the running list) for blocks.
struct kv_preempted {
    int64_t seq_id = 0;
    bool swapped = false;         // its rows go to host memory: copy them out of blocks first
    std::vector<int32_t> blocks;  // swap: the blocks to copy out, in position order
    int32_t n_computed = 0;       // swap: rows that hold data
};

struct kv_admitted {
    int64_t seq_id = 0;
    int32_t n_computed = 0;   // prefix-cache hit (or swapped rows): its first chunk starts here
    int32_t n_cached = 0;     // tokens shared from the prefix cache
    int32_t n_blocks = 0;     // its table after admission
    bool swapped_in = false;  // copy its rows back from host memory into swap_in_blocks first
    std::vector<int32_t> swap_in_blocks;
    std::string swap_error;  // set when the copy back failed: its rows are lost, the sequence fails
};

// A sequence that can never fit: it needs n_tokens positions and the whole pool holds fewer.
struct kv_too_big {
    int64_t seq_id = 0;
    int32_t n_tokens = 0;
};

struct kv_pool_view {
    int32_t block_size = 0;
    int32_t n_blocks = 0;
    int32_t n_used = 0;
    int32_t n_cached = 0;
    int32_t n_free = 0;
    int64_t n_prefix_queries = 0;
    int64_t n_prefix_hits = 0;
};

struct kv_step_grant {
    static constexpr const char* name = "kv_step_grant";
    int64_t step_id = 0;
    std::vector<kv_step_seq> seqs;
    std::vector<kv_preempted> preempted;  // in order; all precede the admissions
    std::vector<kv_admitted> admitted;    // in order (a request preempted in this step may be readmitted)
    std::vector<int64_t> deferred;        // candidates not admitted this step
    std::vector<kv_too_big> failed;       // in order
    // Forks whose parent no longer holds the blocks (it was preempted since): the child recomputes, as if preempted.
    std::vector<int64_t> fork_failed;
    // Copy-on-write, before the step: the KV rows of block copy_src[i] go to block copy_dst[i] (a forked choice, or its
    // parent, writing into the block they share).
    std::vector<int32_t> copy_src;
    std::vector<int32_t> copy_dst;
    kv_pool_view pool;
    std::string error;  // non-empty: the allocator failed on this request
    // The KV allocator's lane ran the swaps and copy-on-write copies above on its device stream (kv_copy_lane.h):
    // the step waits for this event before it reads or writes KV blocks (null: nothing to wait for on a device).
    std::shared_ptr<const device_event> copies_done;
};

using kv_allocator_msg = std::variant<kv_step_request>;

}  // namespace troupe
