// engine_snapshot: what the admin console, /metrics and `troupe bench serve` read about a running
// engine, taken at one instant. Plain values; engine::snapshot() fills it (cheap: it may be called
// several times a second).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/common/request_types.h"
#include "core/runtime/latency_histogram.h"

namespace troupe {

enum class request_state { tokenizing, waiting, prefilling, decoding, preempted, finishing };

struct request_view {
    request_id id = 0;
    request_state state = request_state::waiting;
    double age_ms = 0;  // since submit
    int32_t n_prompt_tokens = 0;
    int32_t n_computed_prompt_tokens = 0;  // prefill progress (chunked prefill)
    int32_t n_generated_tokens = 0;
    int32_t n_cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache
    int32_t n_kv_blocks = 0;
    int32_t n_preemptions = 0;  // times it was preempted (recompute or swap) and resumed
};

struct kv_view {
    int32_t block_size = 0;
    int32_t n_blocks = 0;          // the pool
    int32_t n_used = 0;            // referenced by running sequences
    int32_t n_cached = 0;          // free but holding reusable prefix blocks (evicted LRU when needed)
    int32_t n_free = 0;            // neither
    int64_t n_prefix_queries = 0;  // prompt blocks looked up in the prefix cache
    int64_t n_prefix_hits = 0;     // of which found
    double prefix_hit_rate = 0;    // n_prefix_hits / n_prefix_queries
    uint64_t bytes_per_block = 0;
    int64_t n_preemptions = 0;
};

struct step_view {
    int64_t n_steps = 0;
    int32_t last_batch_size = 0;    // sequences in the last step
    int32_t last_batch_tokens = 0;  // tokens in the last step (prefill chunks + decodes)
    double mean_batch_size = 0;     // over the last minute
    double mean_batch_tokens = 0;
    // The executor between steps while sequences were running (scheduler_core.h, "Planning ahead"):
    int64_t n_steps_ahead = 0;           // steps planned while the previous one ran
    int64_t n_idle_gaps = 0;             // gaps measured (step starts after a step that left sequences running)
    double executor_idle_s = 0;          // their sum: from a step's end to the next one's start
    double executor_busy_s = 0;          // those steps' own times
    double executor_idle_max_s = 0;      // the longest gap
    int64_t n_prefill_tokens = 0;        // prompt positions run through the model (recomputes included)
    int64_t n_forks = 0;                 // choices of parallel sampling forked from another's sequence
    int64_t n_forked_prompt_tokens = 0;  // prompt tokens those choices shared instead of computing them
};

// Speculative decoding, over the engine's life (all zero without a spec plugin).
struct spec_view {
    std::string plugin;                // "spec/ngram"; empty: no speculation
    int32_t max_draft = 0;             // the configured draft cap per sequence and step
    int32_t draft_cap = 0;             // the cap of the last planned step: 0 where the controller turned drafting off
    bool adaptive = false;             // the draft controller decides (actors/scheduler/draft_controller.h)
    int64_t n_draft_steps = 0;         // sequence-steps that verified a proposal
    int64_t n_drafted = 0;             // draft positions verified (each proposal's depth)
    int64_t n_draft_nodes = 0;         // draft tokens verified (a tree has more than its depth)
    int64_t n_accepted = 0;            // draft tokens accepted
    double acceptance_rate = 0;        // n_accepted / n_drafted
    double acceptance_length = 0;      // tokens per target step where drafted: 1 + n_accepted / n_draft_steps
    double draft_length = 0;           // mean proposal depth: n_drafted / n_draft_steps
    int64_t n_steps_on = 0;            // decode steps planned with drafts
    int64_t n_steps_off = 0;           // decode steps the controller planned without
    int64_t n_probes = 0;              // controller windows that re-measured the mode not chosen
    int64_t n_switches = 0;            // controller decisions changed
    double tokens_per_s_drafting = 0;  // the controller's rates at the last step's batch size (0: not measured)
    double tokens_per_s_plain = 0;
};

struct engine_snapshot {
    bool accepting = true;               // false while draining / stopping
    std::vector<request_view> requests;  // waiting and running, oldest first
    kv_view kv;
    step_view steps;
    spec_view spec;
    // Over a sliding window (the last 5 minutes) of finished requests. NOTE: these summaries hold
    // milliseconds in their *_us fields (median_us is the median in ms); n is the number of requests.
    latency_summary ttft_ms;  // submit -> first token
    latency_summary tpot_ms;  // mean time per output token after the first, per request
    latency_summary e2e_ms;   // submit -> done
    double tokens_per_s =
        0;  // generated tokens per second over the last minute (between snapshot() calls; running requests count)
    double requests_per_s = 0;  // finished requests per second over the last minute
    int64_t n_completed = 0, n_failed = 0, n_cancelled = 0, n_refused = 0;
    int64_t n_generated_tokens = 0, n_prompt_tokens = 0;
};

}  // namespace troupe
