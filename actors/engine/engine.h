// engine: the five actors wired into one pipeline, and the API a front end calls.
//
//   submit ─► tokenizer ─► scheduler ⇄ KV allocator (block pool, prefix cache)
//                 │            ⇅
//                 │         executor (model_runner, samplers, draft verification)
//                 ▼            │
//              streamer ◄──────┘ (via the scheduler: tokens + finish) ─► sink callbacks
//
// Lanes: lane_layout chooses how actors are pinned to threads. control_and_compute (the default)
// puts the executor alone on the compute lane and the four light actors on one control lane; a
// caller-driven lane (the test constructor) runs everything on the caller's thread, deterministically.
//
// Backpressure: submit() fails with "overloaded: ..." when the tokenizer's mailbox is full; later
// overloads (scheduler queue, streamer backlog) reach the sink's on_error with the same prefix.
// Sinks are called on the control lane (the streamer's): they must return quickly.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/common/request_types.h"
#include "actors/engine/engine_snapshot.h"
#include "actors/engine/request_window.h"
#include "actors/scheduler/scheduling_policy.h"
#include "actors/tokenizer/text_codec.h"
#include "core/model/model_runner.h"
#include "core/plugin_host/speculator.h"
#include "core/result.h"
#include "core/runtime/latency_histogram.h"
#include "core/runtime/mailbox_stats.h"
#include "core/sampling/sampler.h"

namespace troupe {

class lane;
class step_fences;
class tokenizer_actor;
class scheduler_actor;
class kv_allocator_actor;
class executor_actor;
class streamer_actor;

enum class lane_layout {
    one_lane,             // every actor on one thread
    control_and_compute,  // executor on its own thread, the others on one
    lane_per_actor,       // five threads
};

struct engine_params {
    int32_t max_waiting = 256;          // scheduler's waiting queue
    int32_t max_running = 16;           // sequences per step
    int32_t max_batched_tokens = 2048;  // token budget per step: decodes first, then prefill chunks
    batching_policy policy = batching_policy::continuous;
    preemption_mode preemption = preemption_mode::recompute;  // swap only where the runner has device memory
    bool prefix_caching = true;                               // share KV blocks of identical prompt prefixes
    int32_t max_draft = 0;              // draft tokens (tree nodes) per sequence and step with a speculator (0: off)
    bool adaptive_draft = true;         // turn drafting off per batch size where it does not pay (draft_controller)
    bool plan_ahead = true;             // plan step N+1 while step N runs (scheduler_core.h, "Planning ahead")
    int32_t submit_capacity = 1024;     // tokenizer mailbox: submissions not yet tokenized
    int32_t scheduler_capacity = 1024;  // scheduler mailbox: tokenized prompts not yet queued
    int32_t streamer_capacity = 1024;   // streamer mailbox: token deliveries not yet sent
    lane_layout lanes = lane_layout::control_and_compute;
};

struct engine_parts {
    std::shared_ptr<model_runner> runner;
    std::shared_ptr<const text_codec> codec;
    std::shared_ptr<speculator> spec;  // optional: speculative decoding
};

struct request {
    std::string prompt;
    sampling_params sampling;
    std::optional<std::vector<int32_t>> prompt_ids;  // used instead of the prompt when present
    int32_t logprobs = -1;  // -1: off; 0: the sampled token's logprob; k > 0: also the top k (sink.on_logprobs)
    // With logprobs >= 0: the prompt tokens' logprobs too (OpenAI echo), through sink.on_prompt_logprobs. Such a
    // request computes its whole prompt (no prefix-cache hit).
    bool prompt_logprobs = false;
    // Parallel sampling (n > 1, best_of) of one prompt: the first choice says how many more follow (n_forks), each of
    // those is submitted right after it with fork_of = its id, the same prompt and the same sampling parameters but
    // the seed. The prompt is then computed once and the others fork from the first at its first token, sharing its
    // prompt's KV blocks (scheduler_core.h, "Parallel sampling"); each stays a request of its own (id, sink, cancel).
    int32_t n_forks = 0;
    request_id fork_of = 0;
};

struct engine_stats {
    int64_t n_submitted = 0;
    int64_t n_refused = 0;  // submit() answered overloaded / stopped
    int64_t n_completed = 0;
    int64_t n_cancelled = 0;
    int64_t n_failed = 0;
    int64_t n_in_flight = 0;
    int64_t n_waiting = 0;
    int64_t n_running = 0;
    int64_t n_steps = 0;
    int64_t n_tokens = 0;
    int64_t n_drafted = 0;
    int64_t n_draft_accepted = 0;
    double draft_acceptance = 0;           // n_draft_accepted / n_drafted
    latency_summary token_overhead;        // per token: sampled (executor) -> delivered (streamer), microseconds
    std::vector<mailbox_stats> mailboxes;  // tokenizer, scheduler, kv_allocator, executor, streamer
    int64_t n_preemptions = 0;
};

class engine {
public:
    // Threaded: lanes as params.lanes says; start() starts them.
    engine(engine_parts parts, engine_params params);
    // Every actor on a caller-driven lane (tests): the caller runs it with lane::poll/run_until_idle.
    engine(engine_parts parts, engine_params params, lane& manual);
    ~engine();
    engine(const engine&) = delete;
    engine& operator=(const engine&) = delete;

    status start();
    result<request_id> submit(request r, request_sink sink);
    // Ends the request with finish_reason::cancelled (no-op if it already ended).
    void cancel(request_id id);
    // Refuses new requests, waits up to drain_timeout for those in flight, then fails the rest with a
    // clear reason and stops the lanes. Ok when everything drained; else says how many were failed.
    status stop(std::chrono::milliseconds drain_timeout);
    engine_stats stats() const;
    // The live view for the admin console and /metrics (issue 3; see engine_snapshot.h).
    engine_snapshot snapshot() const;
    // Stops admitting new requests (submit answers "engine is draining: ..."); those in flight finish.
    // Idempotent; stop() still ends the engine (and waits for the drain up to its timeout).
    void drain();
    bool draining() const { return draining_.load(); }
    std::string description() const;

private:
    void build(engine_parts parts, const engine_params& params, lane* tok, lane* sched, lane* kv, lane* exec,
               lane* stream);
    void on_request_end(request_id id, request_outcome outcome);
    // Waits (or, on a manual lane, runs it) until no request is in flight or the deadline passes.
    bool wait_idle(steady_clock::time_point deadline);

    engine_params params_;
    std::string description_;
    std::string spec_name_;  // the speculator's name, empty without one
    uint64_t bytes_per_token_ = 0;
    std::vector<std::unique_ptr<lane>> owned_lanes_;
    std::shared_ptr<step_fences> fences_;  // steps published by the executor's lane, awaited by the KV copies
    lane* manual_ = nullptr;
    latency_histogram overhead_;
    std::unique_ptr<tokenizer_actor> tokenizer_;
    std::unique_ptr<scheduler_actor> scheduler_;
    std::unique_ptr<kv_allocator_actor> kv_allocator_;
    std::unique_ptr<executor_actor> executor_;
    std::unique_ptr<streamer_actor> streamer_;

    request_window window_;
    // (time, generated tokens so far) at each snapshot() of the last minute: the live token rate, which
    // counts the running requests' tokens too (the window sees a request only when it ends).
    mutable std::mutex rate_mutex_;
    mutable std::deque<std::pair<time_point, int64_t>> token_samples_;
    std::atomic<bool> accepting_{false};
    std::atomic<bool> draining_{false};
    std::atomic<bool> stopped_{false};
    std::atomic<request_id> next_id_{1};
    std::atomic<int64_t> n_submitted_{0};
    std::atomic<int64_t> n_refused_{0};
    std::atomic<int64_t> n_completed_{0};
    std::atomic<int64_t> n_cancelled_{0};
    std::atomic<int64_t> n_failed_{0};
    std::atomic<int64_t> n_in_flight_{0};
    mutable std::mutex idle_mutex_;
    std::condition_variable idle_cv_;
};

}  // namespace troupe
