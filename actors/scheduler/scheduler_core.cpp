#include "actors/scheduler/scheduler_core.h"

#include <algorithm>

#include "core/result.h"

namespace troupe {
namespace {

kv_geometry geometry_of(const scheduler_params& c) {
    if (c.kv.block_size > 0 && c.kv.n_blocks > 0) return c.kv;
    return kv_geometry{c.n_ctx, c.max_running};  // contiguous: one block of the context per sequence
}

std::string too_big(int32_t n_tokens) {
    return "the KV cache cannot hold " + std::to_string(n_tokens) +
           " tokens for one sequence; raise kv.memory or lower max_tokens";
}

draft_controller_params controller_params_of(const scheduler_params& c) {
    draft_controller_params p;
    p.max_draft = c.max_draft;
    p.adaptive = c.adaptive_draft;
    return p;
}

}  // namespace

kv_allocator_params kv_allocator_params_from(const scheduler_params& c) {
    return kv_allocator_params{geometry_of(c), c.n_ctx, c.prefix_caching, c.kv_group_windows};
}

void scheduler_output::clear() {
    retire.clear();
    deliveries.clear();
    failures.clear();
    step.reset();
    kv_request.reset();
}

scheduler_core::scheduler_core(scheduler_params config)
    : config_(std::move(config)), geometry_(geometry_of(config_)), controller_(controller_params_of(config_)) {
    pool_view_.block_size = geometry_.block_size;
    pool_view_.n_blocks = geometry_.n_blocks;
    pool_view_.n_free = geometry_.n_blocks;
    TROUPE_ASSERT(config_.n_ctx > 0, "scheduler needs the context length");
    TROUPE_ASSERT(config_.max_running > 0 && config_.max_waiting > 0, "scheduler limits must be positive");
    TROUPE_ASSERT(config_.max_batched_tokens > 0, "scheduler needs a positive token budget");
}

void scheduler_core::enqueue(const enqueue_request& r, scheduler_output& out) {
    TROUPE_ASSERT(!seqs_.contains(r.id), "request " + std::to_string(r.id) + " enqueued twice");
    const auto n_prompt = static_cast<int32_t>(r.prompt ? r.prompt->size() : 0);
    std::string problem;
    if (stopping_) {
        problem = stop_reason_;
    } else if (n_prompt == 0) {
        problem = "the prompt is empty";
    } else if (n_prompt >= config_.n_ctx) {
        problem = "the prompt has " + std::to_string(n_prompt) + " tokens; the context holds " +
                  std::to_string(config_.n_ctx) + ", so at most " + std::to_string(config_.n_ctx - 1) + " fit";
    } else if (r.params->max_tokens < 1) {
        problem = "max_tokens must be at least 1, got " + std::to_string(r.params->max_tokens);
    } else if (blocks_for(n_prompt + 1) > geometry_.n_blocks) {
        problem = "the KV cache cannot hold " + std::to_string(n_prompt + 1) + " tokens for one sequence (" +
                  std::to_string(geometry_.n_blocks) + " blocks of " + std::to_string(geometry_.block_size) +
                  "); raise kv.memory or shorten the prompt";
    } else if (static_cast<int32_t>(waiting_.size()) >= config_.max_waiting) {
        problem = "overloaded: " + std::to_string(waiting_.size()) + " requests are already waiting (limit " +
                  std::to_string(config_.max_waiting) + ")";
    }
    auto leader = r.fork_of != 0 ? seqs_.find(r.fork_of) : seqs_.end();
    const bool follows = leader != seqs_.end() && problem.empty() && may_follow(leader->second, r);
    if (leader != seqs_.end() && leader->second.n_coming > 0) leader->second.n_coming--;  // arrived, one way or another
    if (!problem.empty()) {
        out.failures.push_back({r.id, problem});
        if (awaiting_) changed_while_awaiting_ = true;
        schedule(out);  // its leader may wait for it no longer
        return;
    }
    sequence_state s;
    s.id = r.id;
    s.params = r.params;
    s.t_submit = r.t_submit;
    s.tokens.assign(r.prompt->begin(), r.prompt->end());
    s.n_prompt = n_prompt;
    s.logprobs = r.logprobs;
    s.prompt_logprobs = r.prompt_logprobs && r.logprobs >= 0;
    s.kv_tokens = r.prompt;
    if (follows) {
        s.leader = r.fork_of;
        leader->second.followers.push_back(r.id);
    } else if (r.n_forks > 0 && config_.can_fork && 1 + r.n_forks <= config_.max_running &&
               blocks_for(n_prompt + 1) + r.n_forks <= geometry_.n_blocks) {
        s.n_coming = r.n_forks;  // held until they are here
    }
    const bool waits = !follows;
    seqs_.emplace(r.id, std::move(s));
    if (awaiting_) changed_while_awaiting_ = true;
    if (waits) waiting_.push_back(r.id);
    schedule(out);
}

bool scheduler_core::may_follow(const sequence_state& leader, const enqueue_request& r) const {
    return leader.n_coming > 0 && leader.leader == 0 && leader.n_generated == 0 && leader.n_unknown == 0 &&
           leader.where == phase::waiting && leader.tokens == *r.prompt &&
           leader.prompt_logprobs == (r.prompt_logprobs && r.logprobs >= 0);
}

void scheduler_core::cancel(request_id id, scheduler_output& out) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) return;  // already finished, or never got here (then the tokenizer failed it)
    end(it->second, finish_reason::cancelled, out);
    schedule(out);
}

void scheduler_core::finish(request_id id, scheduler_output& out) {
    if (!seqs_.contains(id)) return;
    drop(id, out);
    schedule(out);
}

void scheduler_core::abort_all(const std::string& reason, scheduler_output& out) {
    stopping_ = true;
    stop_reason_ = reason;
    std::vector<request_id> ids;
    for (const auto& [id, s] : seqs_) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    fail(ids, reason, out);
}

void scheduler_core::fail(const std::vector<request_id>& ids, const std::string& message, scheduler_output& out) {
    for (request_id id : ids) {
        if (!seqs_.contains(id)) continue;
        out.failures.push_back({id, message});
        drop(id, out);
    }
    schedule(out);
}

void scheduler_core::abandon_step(int64_t step_id) {
    for (const step_record& r : in_flight_) {
        if (r.step_id != step_id) continue;
        // Its sequences are as before it was planned: what it would have computed is pending again.
        for (size_t i = 0; i < r.ids.size(); ++i) {
            auto it = seqs_.find(r.ids[i]);
            if (it == seqs_.end() || it->second.epoch != r.epochs[i]) continue;
            it->second.n_ahead -= r.n_inputs[i];
            if (r.samples[i]) it->second.n_unknown--;
        }
    }
    std::erase_if(in_flight_, [&](const step_record& r) { return r.step_id == step_id; });
}

void scheduler_core::abandon_request(int64_t step_id) {
    if (awaiting_ && *awaiting_ == step_id) awaiting_.reset();
}

void scheduler_core::step_finished(const step_done& d, scheduler_output& out) {
    TROUPE_ASSERT(!in_flight_.empty() && in_flight_.front().step_id == d.step_id,
                  "step " + std::to_string(d.step_id) + " finished but was not the oldest in flight");
    step_record record = std::move(in_flight_.front());
    in_flight_.pop_front();
    counters_.n_steps++;
    count_idle(d);
    if (!d.error.empty()) {
        fail(record.ids, "step " + std::to_string(d.step_id) + " failed: " + d.error, out);
        return;
    }
    draft_step_observation o;
    o.n_seqs = static_cast<int32_t>(record.ids.size());
    o.draft_cap = record.draft_cap;
    o.decode_only = record.decode_only;
    // The time a step costs the clients is from the previous step's end to this one's: the executor's work plus the
    // scheduling, KV round trip and messages between steps, which drafting saves per token when it saves steps.
    const bool after_previous = last_step_end_ != time_point{} && d.t_end > last_step_end_;
    o.step_s = after_previous ? std::chrono::duration<double>(d.t_end - last_step_end_).count() : d.step_s;
    if (d.t_end != time_point{}) last_step_end_ = d.t_end;
    for (const sequence_result& r : d.results) o.n_tokens += static_cast<int64_t>(r.tokens.size());
    controller_.observe(o);
    TROUPE_ASSERT(d.results.size() == record.ids.size(), "step " + std::to_string(d.step_id) + " has " +
                                                             std::to_string(d.results.size()) + " results for " +
                                                             std::to_string(record.ids.size()) + " sequences");
    for (size_t i = 0; i < d.results.size(); ++i) {
        const sequence_result& r = d.results[i];
        TROUPE_ASSERT(r.seq_id == record.ids[i], "step results are not in plan order");
        auto it = seqs_.find(r.seq_id);
        // Cancelled or finished while the step ran, or preempted since (recomputed from its tokens): the choices that
        // forked in this step did not (they fork at its next first sample, or run on their own).
        if (it == seqs_.end() || it->second.epoch != record.epochs[i]) {
            for (const sequence_result& fr : r.forks) out.retire.push_back(fr.seq_id);
            continue;
        }
        consume(it->second, r, record.n_inputs[i], record.samples[i] != 0, out);
    }
    running_after_last_step_ = !running_.empty();
    plan(out);  // always at once: the executor is waiting for the next step (or runs the one planned ahead)
}

void scheduler_core::count_idle(const step_done& d) {
    if (d.t_end == time_point{}) return;
    const time_point start =
        d.t_end - std::chrono::duration_cast<steady_clock::duration>(std::chrono::duration<double>(d.step_s));
    if (running_after_last_step_ && last_step_end_ != time_point{}) {
        const double idle = std::max(0.0, std::chrono::duration<double>(start - last_step_end_).count());
        counters_.n_idle_gaps++;
        counters_.executor_idle_s += idle;
        counters_.executor_busy_s += d.step_s;
        counters_.executor_idle_max_s = std::max(counters_.executor_idle_max_s, idle);
    }
    running_after_last_step_ = false;
}

void scheduler_core::consume(sequence_state& s, const sequence_result& r, int32_t n_inputs, bool samples,
                             scheduler_output& out) {
    const auto& p = *s.params;
    // KV now holds the step's inputs and the accepted drafts.
    s.n_computed += n_inputs + r.n_accepted;
    s.n_ahead -= n_inputs;
    computed_.push_back({s.id, s.n_computed});
    if (!samples) return;  // a prefill chunk: nothing sampled
    s.n_unknown--;
    for (const sequence_result& fr : r.forks) adopt_fork(s, fr, out);
    release_followers(s);  // none are left but those that joined after the step was planned
    counters_.n_drafted += r.n_drafted;
    counters_.n_draft_nodes += r.n_draft_nodes;
    counters_.n_accepted += r.n_accepted;
    if (r.n_draft_nodes > 0) counters_.n_draft_steps++;

    token_delivery d;
    d.id = s.id;
    d.n_drafted = r.n_drafted;
    d.n_accepted = r.n_accepted;
    d.t_sampled = r.t_sampled;
    d.t_admitted = s.t_admitted;
    if (s.prompt_logprobs && !r.prompt_logprobs.empty()) {
        d.prompt_logprobs = r.prompt_logprobs;
        s.prompt_logprobs = false;  // delivered: a recompute after a preemption may use the prefix cache again
    }
    size_t n_used = 0;
    for (int32_t t : r.tokens) {
        s.n_generated++;
        d.n_counted++;
        counters_.n_tokens++;
        n_used++;
        if (is_stop_token(s, t)) {
            d.finish = finish_reason::stop;
            break;
        }
        d.tokens.push_back(t);
        s.tokens.push_back(t);
        if (s.n_generated >= p.max_tokens) {
            d.finish = finish_reason::length;
            break;
        }
    }
    if (!r.logprobs.empty()) {
        d.logprobs.assign(r.logprobs.begin(), r.logprobs.begin() + std::min(n_used, r.logprobs.size()));
    }
    if (!d.finish && !r.tokens.empty()) {
        if (s.n_computed >= config_.n_ctx) d.finish = finish_reason::context_full;
    }
    if (!d.finish) {
        TROUPE_ASSERT(s.pending() == 1, "sequence " + std::to_string(s.id) + " has " + std::to_string(s.pending()) +
                                            " pending tokens after a sample, expected 1");
    }
    std::optional<finish_reason> finish = d.finish;
    out.deliveries.push_back(std::move(d));
    if (finish) drop(s.id, out);
}

void scheduler_core::adopt_fork(sequence_state& leader, const sequence_result& fr, scheduler_output& out) {
    auto it = seqs_.find(fr.seq_id);
    if (it == seqs_.end() || it->second.leader != leader.id) {
        out.retire.push_back(fr.seq_id);  // it left before the fork: the executor's state for it goes
        return;
    }
    sequence_state& c = it->second;
    std::erase(leader.followers, c.id);
    c.leader = 0;
    c.where = phase::running;
    c.ever_admitted = true;
    c.t_admitted = leader.t_admitted;
    c.fresh = false;  // the executor made its state at the fork
    c.n_computed = leader.n_computed;
    c.n_cached = leader.n_cached;
    c.n_sent = static_cast<int32_t>(c.tokens.size());  // the allocator copies the prompt from the leader's
    c.n_blocks = leader.n_blocks;
    c.n_ahead = 0;
    c.n_unknown = 1;  // the token in fr
    counters_.n_prompt_tokens += c.n_prompt;
    counters_.n_forked_prompt_tokens += c.n_prompt;
    counters_.n_forks++;
    forks_.push_back({leader.id, c.id, leader.n_computed});
    running_.push_back(c.id);
    consume(c, fr, 0, true, out);
}

void scheduler_core::release_followers(sequence_state& leader) {
    // To the front of the queue, in their order: they were submitted with the leader.
    for (auto f = leader.followers.rbegin(); f != leader.followers.rend(); ++f) {
        sequence_state& c = seqs_.at(*f);
        c.leader = 0;
        waiting_.push_front(c.id);
    }
    leader.followers.clear();
}

void scheduler_core::requeue(sequence_state& s) {
    running_.erase(std::find(running_.begin(), running_.end(), s.id));
    // A step of it still in flight (planned ahead) computes for nothing: its result is dropped.
    s.epoch++;
    s.n_ahead = 0;
    s.n_unknown = 0;
    s.where = phase::waiting;
    s.fresh = true;
    s.n_sent = 0;
    s.n_blocks = 0;
    s.n_preemptions++;
    counters_.n_preemptions++;
    waiting_.push_front(s.id);
}

bool scheduler_core::is_stop_token(const sequence_state& s, int32_t token) const {
    const auto& p = *s.params;
    if (!p.ignore_eos && std::find(config_.eog_ids.begin(), config_.eog_ids.end(), token) != config_.eog_ids.end())
        return true;
    return std::find(p.stop_tokens.begin(), p.stop_tokens.end(), token) != p.stop_tokens.end();
}

void scheduler_core::end(sequence_state& s, finish_reason reason, scheduler_output& out) {
    token_delivery d;
    d.id = s.id;
    d.t_sampled = steady_clock::now();
    d.t_admitted = s.ever_admitted ? s.t_admitted : s.t_submit;
    d.finish = reason;
    out.deliveries.push_back(std::move(d));
    drop(s.id, out);
}

void scheduler_core::drop(request_id id, scheduler_output& out) {
    auto it = seqs_.find(id);
    TROUPE_ASSERT(it != seqs_.end());
    // Its blocks (if the KV allocator gave it any, perhaps in the grant awaited now) go back with the next request.
    frees_.push_back(id);
    if (awaiting_) changed_while_awaiting_ = true;
    if (it->second.ever_admitted) out.retire.push_back(id);
    if (it->second.leader != 0) {
        // A follower leaving before its fork.
        if (auto l = seqs_.find(it->second.leader); l != seqs_.end()) std::erase(l->second.followers, id);
    }
    release_followers(it->second);
    if (it->second.where == phase::running) {
        running_.erase(std::find(running_.begin(), running_.end(), id));
    } else {
        auto w = std::find(waiting_.begin(), waiting_.end(), id);
        if (w != waiting_.end()) waiting_.erase(w);
    }
    seqs_.erase(it);
}

int32_t scheduler_core::blocks_for(int32_t n_tokens) const {
    return (n_tokens + geometry_.block_size - 1) / geometry_.block_size;
}

kv_step_request scheduler_core::make_request() {
    kv_step_request r;
    r.step_id = next_step_id_;
    r.computed = std::move(computed_);
    r.forks = std::move(forks_);
    r.frees = std::move(frees_);
    computed_.clear();
    forks_.clear();
    frees_.clear();
    requested_.clear();
    r.grows.reserve(running_.size());
    // Planned ahead: no drafts (can_plan_ahead() found the cap 0), and the step in flight's outcome assumed.
    planned_draft_cap_ = in_flight_.empty() ? controller_.cap_for(static_cast<int32_t>(running_.size())) : 0;
    for (request_id id : running_) {
        sequence_state& s = seqs_.at(id);
        kv_grow g;
        g.seq_id = id;
        g.n_computed = s.n_computed + s.n_ahead;
        g.n_unknown = s.n_unknown;
        if (planned_draft_cap_ > 0 && s.n_generated > 0) {
            const int32_t left = s.params->max_tokens - s.n_generated - 1;  // the verified step adds one more
            const int32_t room = config_.n_ctx - (s.n_computed + 1);
            g.draft_cap = std::min({planned_draft_cap_, left, room});
        }
        g.append.assign(s.tokens.begin() + s.n_sent, s.tokens.end());
        s.n_sent = static_cast<int32_t>(s.tokens.size());
        r.grows.push_back(std::move(g));
        requested_.push_back(id);
    }
    r.token_budget = config_.max_batched_tokens;
    r.max_running = config_.max_running;
    r.admit_without_budget = config_.policy == batching_policy::static_batch;
    r.may_admit = (config_.policy == batching_policy::continuous || running_.empty()) && !stopping_;
    r.preemption = config_.preemption == preemption_mode::swap && config_.can_swap ? preemption_mode::swap
                                                                                   : preemption_mode::recompute;
    if (r.may_admit) {
        // As many candidates as may join (one more: a sequence too big to grow may leave), plus those
        // that can never fit (the allocator fails them where the queue reaches them).
        int32_t slots = config_.max_running - static_cast<int32_t>(running_.size()) + 1;
        for (request_id id : waiting_) {
            sequence_state& s = seqs_.at(id);
            if (s.n_coming > 0) continue;  // a leader waits for the choices that fork from it
            const auto n_known = static_cast<int32_t>(s.tokens.size());
            const bool never = blocks_for(std::min(n_known + 1, config_.n_ctx)) > geometry_.n_blocks;
            if (!never && slots-- <= 0) break;
            const auto n_forks = static_cast<int32_t>(s.followers.size());
            slots -= n_forks;
            if (!s.kv_tokens || s.kv_tokens->size() != s.tokens.size())
                s.kv_tokens = std::make_shared<const std::vector<int32_t>>(s.tokens);
            r.admits.push_back({id, s.kv_tokens, s.n_computed, s.swapped, s.prompt_logprobs, n_forks});
            requested_.push_back(id);
        }
    }
    return r;
}

void scheduler_core::add_to_plan(sequence_state& s, const kv_step_seq& g, step_plan& plan, step_record& record) {
    const int32_t n_tokens = g.n_tokens;
    const auto n_known = static_cast<int32_t>(s.tokens.size());
    step_sequence q;
    q.seq_id = s.id;
    q.pos0 = s.n_computed + s.n_ahead;  // after the steps in flight
    // Tokens a step in flight samples are not known yet: the executor puts them in (planned ahead).
    const int32_t n_known_inputs = std::clamp(n_known - q.pos0, 0, n_tokens);
    q.tokens.assign(s.tokens.begin() + q.pos0, s.tokens.begin() + q.pos0 + n_known_inputs);
    q.n_sampled_inputs = n_tokens - n_known_inputs;
    TROUPE_ASSERT(q.n_sampled_inputs <= std::min(s.n_unknown, 1),
                  "sequence " + std::to_string(s.id) + ": " + std::to_string(q.n_sampled_inputs) +
                      " inputs of a step are not known yet, " + std::to_string(s.n_unknown) + " tokens are coming");
    q.tokens.resize(static_cast<size_t>(n_tokens), -1);
    q.block_table = g.block_table;
    q.more_tables = g.more_tables;
    q.params = s.params;
    q.sample = q.pos0 + n_tokens == n_known + s.n_unknown;
    q.max_draft = q.sample ? g.max_draft : 0;
    q.logprobs = s.logprobs;
    if (q.sample && s.n_generated == 0 && s.n_unknown == 0) {
        for (request_id f : s.followers) {
            const sequence_state& c = seqs_.at(f);
            q.forks.push_back({f, c.params, c.logprobs});
        }
    }
    counters_.n_prefill_tokens += std::max(0, std::min(q.pos0 + n_tokens, s.n_prompt) - q.pos0);
    if (s.prompt_logprobs) q.prompt = s.kv_tokens;
    if (s.fresh && q.pos0 > 0) {
        q.context = std::make_shared<const std::vector<int32_t>>(s.tokens.begin(), s.tokens.begin() + q.pos0);
    }
    s.fresh = false;
    s.n_blocks = static_cast<int32_t>(g.block_table->size());
    s.n_ahead += n_tokens;
    if (q.sample) s.n_unknown++;
    counters_.last_batch_tokens += n_tokens + q.max_draft;
    record.decode_only = record.decode_only && n_tokens == 1 && q.sample;
    record.drafts = record.drafts || q.max_draft > 0;
    record.forks = record.forks || !q.forks.empty();
    record.ids.push_back(s.id);
    record.n_inputs.push_back(n_tokens);
    record.samples.push_back(q.sample ? 1 : 0);
    record.epochs.push_back(s.epoch);
    plan.seqs.push_back(std::move(q));
}

void scheduler_core::granted(const kv_step_grant& g, scheduler_output& out) {
    TROUPE_ASSERT(awaiting_ && *awaiting_ == g.step_id,
                  "KV grant for step " + std::to_string(g.step_id) + " that was not requested");
    awaiting_.reset();
    pool_view_ = g.pool;
    for (int64_t id : g.fork_failed) {
        // Its leader lost the prompt's blocks before the fork reached the allocator: it computes them itself.
        auto it = seqs_.find(id);
        if (it == seqs_.end() || it->second.where != phase::running) continue;
        it->second.n_computed = 0;
        requeue(it->second);
    }
    if (release_only_) {
        TROUPE_ASSERT(g.seqs.empty() && g.admitted.empty() && g.preempted.empty(), "a release grant granted a step");
        release_only_ = false;
        plan(out);  // the step may have finished meanwhile: plan the next
        return;
    }
    counters_.last_batch_tokens = 0;
    if (!g.error.empty()) {
        std::vector<request_id> ids = std::move(requested_);
        requested_.clear();
        fail(ids, "KV allocator: " + g.error, out);
        return;
    }
    for (const kv_too_big& f : g.failed) {
        if (!seqs_.contains(f.seq_id)) continue;
        out.failures.push_back({f.seq_id, too_big(f.n_tokens)});
        drop(f.seq_id, out);
    }
    for (const kv_preempted& p : g.preempted) {
        auto it = seqs_.find(p.seq_id);
        if (it == seqs_.end()) continue;  // ended while the request was out
        sequence_state& s = it->second;
        TROUPE_ASSERT(!p.swapped || s.n_ahead == 0,
                      "sequence " + std::to_string(s.id) + " was swapped out while a step of it is in flight");
        if (p.swapped) {
            s.swapped = true;  // the KV allocator's lane copied its rows to host memory (kv_copy_lane.h)
        } else {
            s.n_computed = 0;  // recompute: every known token is pending again
        }
        requeue(s);
    }
    for (const kv_admitted& a : g.admitted) {
        auto it = seqs_.find(a.seq_id);
        if (it == seqs_.end()) continue;
        sequence_state& s = it->second;
        if (!a.swap_error.empty()) {
            out.failures.push_back({s.id, "sequence " + std::to_string(s.id) + ": " + a.swap_error});
            drop(s.id, out);  // its blocks go back with the next request
            continue;
        }
        waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s.id));
        if (a.swapped_in) {
            s.swapped = false;  // its rows are back in swap_in_blocks, copied by the KV allocator's lane
        } else {
            s.n_computed = a.n_computed;
            s.n_cached = a.n_cached;
            if (!s.ever_admitted) {
                counters_.n_prompt_tokens += s.n_prompt;
                counters_.n_cached_prompt_tokens += std::min(a.n_cached, s.n_prompt);
            }
        }
        s.where = phase::running;
        if (!s.ever_admitted) s.t_admitted = steady_clock::now();
        s.ever_admitted = true;
        s.n_sent = static_cast<int32_t>(s.tokens.size());
        s.n_blocks = a.n_blocks;
        running_.push_back(s.id);
    }
    step_plan next;
    step_record record;
    for (const kv_step_seq& q : g.seqs) {
        auto it = seqs_.find(q.seq_id);
        if (it == seqs_.end()) continue;  // ended while the request was out: freed with the next one
        add_to_plan(it->second, q, next, record);
    }
    if (next.seqs.empty()) {
        // Nothing can run now; what arrived or ended meanwhile may change that.
        if (changed_while_awaiting_) {
            changed_while_awaiting_ = false;
            plan(out);
        }
        return;
    }
    changed_while_awaiting_ = false;
    next.step_id = next_step_id_++;
    next.after_copies = g.copies_done;
    record.step_id = next.step_id;
    record.draft_cap = planned_draft_cap_;
    counters_.draft_cap = planned_draft_cap_;
    counters_.last_batch_size = static_cast<int32_t>(next.seqs.size());
    if (!in_flight_.empty()) counters_.n_steps_ahead++;
    in_flight_.push_back(std::move(record));
    out.step = std::move(next);
}

void scheduler_core::schedule(scheduler_output& out) {
    if (config_.plan_on_events) plan(out);
}

bool scheduler_core::can_plan_ahead() const {
    if (!config_.plan_ahead || in_flight_.size() != 1 || awaiting_ || stopping_ || running_.empty()) return false;
    const step_record& r = in_flight_.front();
    if (r.ahead_requested || r.drafts || r.forks || config_.policy != batching_policy::continuous) return false;
    if (config_.preemption == preemption_mode::swap && config_.can_swap) return false;
    if (config_.max_draft > 0 && controller_.cap_for(static_cast<int32_t>(running_.size())) > 0) return false;
    // Every decode of the next step may need a block: all of them must be free, so nothing is preempted.
    if (pool_view_.n_free + pool_view_.n_cached < static_cast<int32_t>(running_.size())) return false;
    for (size_t i = 0; i < r.ids.size(); ++i) {
        auto it = seqs_.find(r.ids[i]);
        if (it == seqs_.end() || it->second.epoch != r.epochs[i] || !r.samples[i]) continue;
        const sequence_state& s = it->second;
        // The token in flight ends it by length, or leaves no position for the next: nothing to plan for it.
        if (s.n_generated + s.n_unknown >= s.params->max_tokens) return false;
        if (s.n_computed + s.n_ahead + 1 >= config_.n_ctx) return false;
    }
    return true;
}

void scheduler_core::plan(scheduler_output& out) {
    if (awaiting_ || out.kv_request) return;
    if (!in_flight_.empty() && can_plan_ahead()) {
        out.kv_request = make_request();
        release_only_ = false;
        in_flight_.front().ahead_requested = true;
    } else if (!in_flight_.empty()) {
        // Blocks of requests that ended while the step runs go back at once (nothing else is asked).
        if (frees_.empty()) return;
        kv_step_request r;
        r.step_id = next_step_id_;
        r.frees = std::move(frees_);
        r.forks = std::move(forks_);  // before the frees: a leader that ended may hand its blocks over
        frees_.clear();
        forks_.clear();
        r.may_admit = false;
        r.max_running = config_.max_running;
        requested_.clear();
        release_only_ = true;
        out.kv_request = std::move(r);
    } else {
        if (running_.empty() && waiting_.empty() && frees_.empty() && computed_.empty()) return;
        out.kv_request = make_request();
        release_only_ = false;
    }
    awaiting_ = out.kv_request->step_id;
    changed_while_awaiting_ = false;
}

void scheduler_core::view(std::vector<request_view>& out, time_point now) const {
    out.clear();
    for (const auto& [id, s] : seqs_) {
        request_view v;
        v.id = id;
        v.age_ms = ms_between(s.t_submit, now);
        v.n_prompt_tokens = s.n_prompt;
        v.n_generated_tokens = s.n_generated;
        v.n_cached_prompt_tokens = s.n_cached;
        v.n_kv_blocks = s.n_blocks;
        v.n_preemptions = s.n_preemptions;
        v.n_computed_prompt_tokens = std::min(s.n_computed, s.n_prompt);
        if (s.where == phase::waiting) {
            v.state = s.n_preemptions > 0 ? request_state::preempted : request_state::waiting;
        } else if (s.pending() > 1 || s.n_generated == 0) {
            v.state = request_state::prefilling;
        } else {
            v.state = request_state::decoding;
        }
        out.push_back(v);
    }
    std::sort(out.begin(), out.end(), [](const request_view& a, const request_view& b) { return a.id < b.id; });
}

}  // namespace troupe
