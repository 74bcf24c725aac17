// scheduler_core: the scheduling policy, a pure class (no Asio) that the scheduler actor wraps.
//
// Requests wait in a bounded FCFS queue. The head is admitted when a running slot is free and the KV
// allocator grants it blocks (one reservation in flight at a time keeps FCFS strict); a refusal
// blocks admission until some sequence releases blocks. At most one step is in flight: when none is,
// every running sequence goes into the next plan with its pending tokens (the whole prompt on its
// first step, then its last sampled token, plus room for draft tokens), so newly admitted prompts
// join the decodes of the others in one batch.
//
// Each step result is checked token by token for the stop conditions, in this order: an
// end-of-generation or stop token (unless ignore_eos; the token is counted but not detokenized),
// max_tokens (finish length), then the context (finish context_full when no position is left).
//
// Per sequence: n_computed = positions in the KV cache; pending = known tokens not yet run;
// n_computed + pending.size() <= n_covered (the positions its blocks cover) whenever it is planned.
//
// Seams for what comes next: a continuous-batching policy replaces plan_step() (token budget, prefill
// chunks with sample=false, preemption by releasing blocks and re-queueing with its tokens as the
// new prompt) and reserve_for() (grow block tables step by step) without touching the messages.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/executor/executor_msgs.h"
#include "actors/kv_allocator/kv_allocator_msgs.h"
#include "actors/scheduler/scheduler_msgs.h"
#include "actors/streamer/streamer_msgs.h"

namespace troupe {

struct scheduler_config {
    int32_t max_waiting = 256;  // queued requests beyond this are refused as overloaded
    int32_t max_running = 16;   // sequences per step
    int32_t n_ctx = 0;          // positions per sequence
    int32_t max_draft = 0;      // speculative tokens per decode step (0: off)
    std::vector<int32_t> eog_ids;
};

// What the scheduler sends after handling one input; the actor shell posts each part.
struct scheduler_output {
    std::vector<reserve_blocks> reserve;
    std::vector<release_blocks> release;
    std::vector<int64_t> retire;             // sequences whose executor state can go
    std::vector<token_delivery> deliveries;  // one deliver_tokens message
    std::vector<fail_stream> failures;
    std::optional<step_plan> step;

    void clear();
};

struct scheduler_counters {
    int64_t n_steps = 0;
    int64_t n_tokens = 0;  // sampled tokens consumed
    int64_t n_drafted = 0;
    int64_t n_accepted = 0;
};

class scheduler_core {
public:
    explicit scheduler_core(scheduler_config config);

    void enqueue(const enqueue_request& r, scheduler_output& out);
    void cancel(request_id id, scheduler_output& out);
    // The streamer already finished the request (stop string): drop it without telling the streamer.
    void finish(request_id id, scheduler_output& out);
    void abort_all(const std::string& reason, scheduler_output& out);
    void granted(const blocks_granted& g, scheduler_output& out);
    void refused(const blocks_refused& r, scheduler_output& out);
    void step_finished(const step_done& d, scheduler_output& out);
    // Supervision and undeliverable output: fail these requests with a message, wherever they are.
    void fail(const std::vector<request_id>& ids, const std::string& message, scheduler_output& out);
    // Supervision: the handler of this step's result threw; forget that it is in flight.
    void abandon_step(int64_t step_id);

    size_t n_waiting() const { return waiting_.size(); }
    size_t n_running() const { return running_.size(); }
    bool step_in_flight() const { return in_flight_.has_value(); }
    bool knows(request_id id) const { return seqs_.contains(id); }
    const scheduler_counters& counters() const { return counters_; }

private:
    enum class phase { waiting, reserving, running };

    struct sequence_state {
        request_id id = 0;
        std::shared_ptr<const std::vector<int32_t>> prompt;
        std::shared_ptr<const sampling_params> params;
        time_point t_submit;
        time_point t_admitted;
        phase where = phase::waiting;
        bool cancel_on_reply = false;  // cancelled (or failed) while its reservation was in flight
        bool failed = false;           // failed while reserving: the client has been told already
        std::shared_ptr<const std::vector<int32_t>> block_table;
        int32_t n_covered = 0;
        int32_t n_computed = 0;
        std::vector<int32_t> pending;  // known tokens not yet in the KV cache
        int32_t n_generated = 0;
        int32_t n_step_inputs = 0;  // tokens (without drafts) in the step in flight
    };

    struct step_record {
        int64_t step_id = 0;
        std::vector<request_id> ids;
    };

    void schedule(scheduler_output& out);
    void admit_head(scheduler_output& out);
    std::optional<step_plan> plan_step();
    int32_t reserve_for(const sequence_state& s) const;
    void consume(sequence_state& s, const sequence_result& r, scheduler_output& out);
    bool is_stop_token(const sequence_state& s, int32_t token) const;
    // Removes the sequence; frees its blocks and executor state.
    void drop(request_id id, scheduler_output& out);
    void end(sequence_state& s, finish_reason reason, scheduler_output& out);

    scheduler_config config_;
    std::unordered_map<request_id, sequence_state> seqs_;
    std::deque<request_id> waiting_;   // FCFS; the head may be reserving
    std::vector<request_id> running_;  // admission order
    bool reserving_ = false;
    bool blocked_on_kv_ = false;  // the head was refused; retry after a release
    bool stopping_ = false;
    std::string stop_reason_;
    std::optional<step_record> in_flight_;
    int64_t next_step_id_ = 1;
    scheduler_counters counters_;
};

}  // namespace troupe
