// scheduler_core: the continuous-batching policy, a pure class (no Asio) that the scheduler actor wraps.
// It decides, step by step, which tokens of which sequences run next; the KV allocator (its own actor,
// kv_allocator_core) owns the blocks. One round trip per step: the scheduler asks for what it wants
// (kv_step_request: its running sequences to extend by their pending tokens, oldest first, the
// waiting requests to admit in FCFS order, the frees since the last step) and turns the answer
// (kv_step_grant) into the step_plan for the executor.
//
// One step is planned whenever none is in flight, under a token budget (max_batched_tokens):
//   1. decodes: every running sequence with one pending token (plus room for draft tokens) gets it,
//      in admission order. Each may need one more KV block; when none is free the latest admitted
//      running sequence is preempted (recompute: its blocks are freed and it goes back to the head of
//      the queue with all its tokens as the new prompt; swap: its blocks are copied to host memory
//      first, where the runner has separate device memory) until the block fits.
//   2. prefill chunks: running sequences still in their prompt get min(pending, budget left) tokens;
//      only the chunk that reaches the prompt's end samples. A long prompt thus takes several steps
//      and never stalls the decodes above.
//   3. admission (FCFS, bounded queue, at most max_running running): the head is admitted when the
//      blocks for its whole prompt are free; its longest cached prefix (whole blocks, at least one
//      token left to compute) is shared instead of recomputed, so its first chunk starts at
//      pos0 = n_cached. If the head's next prompt block is being computed by another sequence in
//      the step in flight, admission waits one step to share it instead of computing it twice.
//   static policy (the baseline): admission only when nothing runs; the admitted batch runs to its end.
// (The block-dependent parts, 1-3 as far as blocks decide them, run in the KV allocator.)
//
// Planning ahead (params.plan_ahead; the engine's default): while step N runs, step N+1 is planned and
// sent, so the executor finds it in its mailbox when N ends instead of waiting for the result to travel
// to the scheduler, the KV round trip and the plan to travel back. The plan assumes N's outcome: each
// sequence N samples has one more token, whose value only the executor knows yet (step_sequence::
// n_sampled_inputs: it puts in the token it sampled), and N's inputs are computed. Only where that
// outcome is sure enough: no drafts in N (their accepted count is unknown) and none planned (drafting
// wins where the controller turns it on), recompute preemption, no sequence of N ending by length or
// context with N's token, and enough free KV blocks for every decode (so planning ahead never preempts a
// sequence whose step is in flight), and no choices forking in N (the step after it runs them at once).
// At most one step runs ahead. A sequence that N ends (a stop token, a
// cancel) wastes its row in N+1; its result is dropped. The step_done of N then plans N+2.
//
// Parallel sampling (enqueue_request::n_forks / fork_of, params.can_fork): the choices of one prompt are one
// sequence until its first sample. The first choice (the leader) waits until the others (followers) have arrived
// and is then admitted only when blocks and running slots for all of them are free; it computes the prompt once. Its
// step that samples first carries the followers (step_sequence::forks): each draws its own first token from the same
// logits with its own seed, and from then on is a running sequence of its own whose KV table shares the leader's
// prompt blocks (kv_fork; a block is counted once while shared, and whoever writes into the shared partial block first
// gets a copy). Until that step the followers are no sequences: a preempted leader takes them along (recompute or
// swap); when the leader leaves before it (cancelled, failed), they run on their own. A forked choice is preempted,
// cancelled and ended like any sequence.
//
// Executor idle time: from a step's end to the next one's start while a sequence was running, summed in
// the counters (and on /metrics): what planning ahead removes.
//
// Each step result is checked token by token for the stop conditions, in this order: an
// end-of-generation or stop token (unless ignore_eos; counted but not detokenized), max_tokens
// (finish length), then the context (finish context_full when no position is left).
//
// Per sequence: tokens = prompt then every sampled token; n_computed = positions in the KV cache;
// tokens[n_computed..] are pending (one after a sample, the rest of the prompt during prefill, all of
// them after a recompute preemption). Its block table covers n_computed plus the step's tokens.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/engine/engine_snapshot.h"
#include "actors/executor/executor_msgs.h"
#include "actors/kv_allocator/kv_allocator_core.h"
#include "actors/kv_allocator/kv_allocator_msgs.h"
#include "actors/scheduler/draft_controller.h"
#include "actors/scheduler/scheduler_msgs.h"
#include "actors/scheduler/scheduling_policy.h"
#include "actors/streamer/streamer_msgs.h"

namespace troupe {

struct scheduler_params {
    int32_t max_waiting = 256;          // queued requests beyond this are refused as overloaded
    int32_t max_running = 16;           // sequences per step
    int32_t max_batched_tokens = 2048;  // token budget per step: decodes, drafts and prefill chunks
    int32_t n_ctx = 0;                  // positions per sequence
    int32_t max_draft = 0;              // speculative tokens per decode step (0: off)
    bool adaptive_draft = true;         // draft_controller turns drafting off where it does not pay
    std::vector<int32_t> eog_ids;
    kv_geometry kv{0, 0};  // block_size 0: one block of n_ctx per sequence, max_running blocks
    bool prefix_caching = true;
    std::vector<int32_t> kv_group_windows;  // model_runner::kv_group_windows() (empty: one table per sequence)
    batching_policy policy = batching_policy::continuous;
    preemption_mode preemption = preemption_mode::recompute;
    bool can_swap = false;  // the runner has separate device memory (swap falls back to recompute otherwise)
    // true: every input that may allow a step plans it at once (the tables in the tests); false: a
    // step result plans the next at once, other inputs leave it to plan() (the actor posts itself a
    // plan_tick, so the arrivals and cancels already queued are handled first).
    bool plan_on_events = true;
    bool plan_ahead = false;  // plan step N+1 while step N runs (see above)
    bool can_fork = false;    // the runner copies KV blocks (copy-on-write), so choices may fork (see above)
};

// What the scheduler sends after handling one input; the actor shell posts each part.
struct scheduler_output {
    std::vector<int64_t> retire;             // sequences whose executor state can go
    std::vector<token_delivery> deliveries;  // one deliver_tokens message
    std::vector<fail_stream> failures;
    std::optional<step_plan> step;
    std::optional<kv_step_request> kv_request;  // to the KV allocator; its grant goes to granted()

    void clear();
};

struct scheduler_counters {
    int64_t n_steps = 0;
    int64_t n_tokens = 0;       // sampled tokens consumed
    int64_t n_drafted = 0;      // draft positions verified (the proposals' depths)
    int64_t n_draft_nodes = 0;  // draft tokens verified (trees have more than their depth)
    int64_t n_accepted = 0;     // accepted draft tokens
    int64_t n_draft_steps = 0;  // sequence-steps that verified a proposal
    int32_t draft_cap = 0;      // the draft cap of the last planned step (the controller's choice)
    int64_t n_preemptions = 0;
    int64_t n_prompt_tokens = 0;         // admitted prompt tokens
    int64_t n_cached_prompt_tokens = 0;  // of which served from the prefix cache
    int64_t n_forked_prompt_tokens = 0;  // of which shared by forking from another choice's sequence
    int64_t n_prefill_tokens = 0;        // prompt positions run through the model (recomputes included)
    int64_t n_forks = 0;                 // choices forked from another's sequence
    int32_t last_batch_size = 0;
    int32_t last_batch_tokens = 0;
    int64_t n_steps_ahead = 0;       // steps planned while the previous one ran
    int64_t n_idle_gaps = 0;         // step starts measured after a step that left sequences running
    double executor_idle_s = 0;      // those steps' starts minus the previous steps' ends
    double executor_busy_s = 0;      // those steps' own times (step_done::step_s)
    double executor_idle_max_s = 0;  // the longest such gap
};

// The KV allocator's parameters for this scheduler's config (block_size 0: contiguous).
kv_allocator_params kv_allocator_params_from(const scheduler_params& c);

class scheduler_core {
public:
    explicit scheduler_core(scheduler_params config);

    void enqueue(const enqueue_request& r, scheduler_output& out);
    void cancel(request_id id, scheduler_output& out);
    // The streamer already finished the request (stop string): drop it without telling the streamer.
    void finish(request_id id, scheduler_output& out);
    void abort_all(const std::string& reason, scheduler_output& out);
    void step_finished(const step_done& d, scheduler_output& out);
    // The KV allocator's answer to out.kv_request: the step's blocks, preemptions and admissions.
    void granted(const kv_step_grant& g, scheduler_output& out);
    // Supervision and undeliverable output: fail these requests with a message, wherever they are.
    void fail(const std::vector<request_id>& ids, const std::string& message, scheduler_output& out);
    // Supervision: the handler of this step's result threw; forget that it is in flight.
    void abandon_step(int64_t step_id);
    // Supervision: the grant for this request cannot be used; forget that it is awaited.
    void abandon_request(int64_t step_id);
    // Plans the next step if none is in flight and something can run.
    void plan(scheduler_output& out);
    // No step in flight and some request waiting or running: plan() may produce a step.
    // plan() has something to ask the KV allocator: a step (none in flight, some request waiting or
    // running), or blocks to free.
    bool wants_step() const {
        if (awaiting_) return false;
        if (!in_flight_.empty()) return can_plan_ahead() || !frees_.empty();
        return !running_.empty() || !waiting_.empty() || !frees_.empty() || !computed_.empty();
    }
    // One step is in flight and the next may be planned now (see "Planning ahead").
    bool can_plan_ahead() const;

    size_t n_waiting() const { return waiting_.size(); }
    size_t n_running() const { return running_.size(); }
    bool step_in_flight() const { return !in_flight_.empty(); }
    bool grant_awaited() const { return awaiting_.has_value(); }
    bool knows(request_id id) const { return seqs_.contains(id); }
    const scheduler_counters& counters() const { return counters_; }
    // The KV pool as of the last grant.
    const kv_pool_view& kv_pool() const { return pool_view_; }
    const scheduler_params& config() const { return config_; }
    const draft_controller& drafts() const { return controller_; }
    // The requests, oldest first, for engine::snapshot().
    void view(std::vector<request_view>& out, time_point now) const;

private:
    enum class phase { waiting, running };

    struct sequence_state {
        request_id id = 0;
        std::shared_ptr<const sampling_params> params;
        time_point t_submit;
        time_point t_admitted;
        phase where = phase::waiting;
        std::vector<int32_t> tokens;  // prompt, then sampled tokens; [n_computed, size) pending
        int32_t n_prompt = 0;         // the request's prompt
        int32_t n_computed = 0;
        int32_t n_cached = 0;  // prompt tokens shared from the prefix cache at the last admission
        int32_t n_generated = 0;
        int32_t n_ahead = 0;    // inputs of its steps in flight (not yet in n_computed)
        int32_t n_unknown = 0;  // tokens those steps sample (not yet in tokens)
        int32_t epoch = 0;      // preemptions so far: results of steps planned before the last are stale
        bool swapped = false;   // its KV rows are in host memory (swap preemption)
        bool fresh = true;      // the executor has not seen it since (re)admission
        bool ever_admitted = false;
        int32_t n_preemptions = 0;
        int32_t logprobs = -1;
        bool prompt_logprobs = false;  // until its first sample: computes its whole prompt, with logits per row
        int32_t n_sent = 0;            // tokens the KV allocator has (it keeps them for the prefix cache)
        int32_t n_blocks = 0;          // its block table's length, from the last grant
        std::shared_ptr<const std::vector<int32_t>> kv_tokens;  // tokens as sent for admission
        // Parallel sampling (see above). A leader: its followers (submission order) and how many are still to come.
        // A follower: its leader (no phase of its own: in neither waiting_ nor running_ until it forks).
        std::vector<request_id> followers;
        int32_t n_coming = 0;
        request_id leader = 0;
        int32_t pending() const { return static_cast<int32_t>(tokens.size()) - n_computed; }
    };

    struct step_record {
        int64_t step_id = 0;
        std::vector<request_id> ids;
        std::vector<int32_t> n_inputs;  // [ids] tokens each runs (without drafts)
        std::vector<uint8_t> samples;   // [ids] whether it samples
        std::vector<int32_t> epochs;    // [ids] its epoch when planned
        int32_t draft_cap = 0;          // the cap it was planned with
        bool decode_only = true;        // every sequence ran one token and sampled
        bool drafts = false;            // some sequence may add draft tokens
        bool ahead_requested = false;   // the next step was asked for while this one is in flight
        bool forks = false;             // choices fork in it: the next step is planned with them, not ahead
    };

    void schedule(scheduler_output& out);
    kv_step_request make_request();
    void add_to_plan(sequence_state& s, const kv_step_seq& q, step_plan& plan, step_record& record);
    void consume(sequence_state& s, const sequence_result& r, int32_t n_inputs, bool samples, scheduler_output& out);
    // Whether the choice r may fork from request leader (its prompt, a fork group that can ever run).
    bool may_follow(const sequence_state& leader, const enqueue_request& r) const;
    // The follower forked at leader's first sample (fr: its first token): it becomes a running sequence.
    void adopt_fork(sequence_state& leader, const sequence_result& fr, scheduler_output& out);
    // The followers that have not forked (their leader leaves, or forked without them) run on their own.
    void release_followers(sequence_state& leader);
    // A running sequence goes back to the front of the queue (preempted, or its fork failed).
    void requeue(sequence_state& s);
    void count_idle(const step_done& d);
    bool is_stop_token(const sequence_state& s, int32_t token) const;
    // Removes the sequence; frees its blocks and executor state.
    void drop(request_id id, scheduler_output& out);
    void end(sequence_state& s, finish_reason reason, scheduler_output& out);
    int32_t blocks_for(int32_t n_tokens) const;

    scheduler_params config_;
    kv_geometry geometry_;
    kv_pool_view pool_view_;
    std::vector<int64_t> frees_;         // for the next kv_step_request
    std::vector<kv_computed> computed_;  // for the next kv_step_request
    std::vector<kv_fork> forks_;         // for the next kv_step_request
    std::optional<int64_t> awaiting_;    // a kv_step_request is out; its step id
    std::vector<request_id> requested_;  // the sequences it named
    bool changed_while_awaiting_ = false;
    bool release_only_ = false;  // the awaited request only frees blocks (a step is in flight)
    std::unordered_map<request_id, sequence_state> seqs_;
    std::deque<request_id> waiting_;   // FCFS; preempted sequences go back to the front
    std::vector<request_id> running_;  // admission order
    bool stopping_ = false;
    std::string stop_reason_;
    std::deque<step_record> in_flight_;  // sent to the executor, oldest first; two when planned ahead
    int64_t next_step_id_ = 1;
    scheduler_counters counters_;
    draft_controller controller_;
    int32_t planned_draft_cap_ = 0;         // the cap make_request() gave the step being planned
    time_point last_step_end_{};            // the executor's end of the last step (step_done::t_end)
    bool running_after_last_step_ = false;  // sequences were running when the last step ended
};

}  // namespace troupe
