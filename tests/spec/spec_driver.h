// spec_driver: runs sequences through executor_core directly (no actors, no scheduler): every iteration is one step
// plan with each unfinished sequence (its prompt first, then its last token with room for drafts), KV blocks come
// from a free list, and a sequence leaves when it has its tokens. The spec harness compares what comes out with and
// without a speculator; the scheduler's own choices (adaptive drafting, token budgets) stay out of the comparison.
//
// A prefix written once (prefill_shared) can start many sequences: their block tables begin with its blocks, and
// their first step runs the rest of their prompt, so a test can draw 100,000 continuations of one prompt.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "actors/executor/executor_core.h"
#include "core/model/model_runner.h"
#include "core/plugin_host/speculator.h"
#include "core/result.h"
#include "core/sampling/sampler.h"

namespace troupe::testing {

struct driven_sequence {
    std::vector<int32_t> prompt;
    sampling_params params;
    int32_t n_new = 0;  // tokens to generate
    // Optional: the blocks of a shared prefix (prefill_shared) holding the KV of prompt[0, n_shared).
    std::shared_ptr<const std::vector<int32_t>> shared_blocks;
    int32_t n_shared = 0;
    bool drafts_on_first_step = false;  // the scheduler drafts from the second step on; tests may ask earlier
    // The scheduler drafts at most the tokens still wanted; false: full trees up to the end (the extra tokens are
    // dropped), for tests of the emitted distribution that want deep trees on short runs.
    bool drafts_within_n_new = true;
    int32_t max_draft = 0;           // > 0: at most this many draft nodes per step (below the speculator's max_nodes)
    std::vector<int32_t> generated;  // out: exactly n_new tokens
};

struct drive_stats {
    int64_t n_steps = 0;        // steps (forward passes) with this sequence set
    int64_t n_seq_steps = 0;    // sequence-steps (one sequence in one step)
    int64_t n_draft_nodes = 0;  // draft nodes verified
    int64_t n_accepted = 0;     // draft tokens accepted
    int64_t n_emitted = 0;      // tokens emitted (accepted + one per sequence-step)
};

class spec_driver {
public:
    // spec: null runs without drafts.
    spec_driver(std::shared_ptr<model_runner> runner, std::shared_ptr<speculator> spec);

    // Writes the KV of `tokens` into fresh blocks (whole blocks only: tokens.size() must be a multiple of the block
    // size) and returns them; they stay taken for the driver's lifetime.
    result<std::shared_ptr<const std::vector<int32_t>>> prefill_shared(std::span<const int32_t> tokens);

    // Runs every sequence to n_new tokens, at most max_running at a time.
    status run(std::vector<driven_sequence>& seqs, int32_t max_running, drive_stats& stats);

    model_runner& runner() { return *runner_; }
    int32_t block_size() const { return block_size_; }

private:
    result<std::vector<int32_t>> take_blocks(int32_t n);

    std::shared_ptr<model_runner> runner_;
    std::shared_ptr<speculator> spec_;
    executor_core core_;
    int32_t block_size_;
    std::vector<int32_t> free_blocks_;
    int64_t next_seq_id_ = 1;
    int64_t next_step_id_ = 1;
};

}  // namespace troupe::testing
