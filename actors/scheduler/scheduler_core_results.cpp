// scheduler_core (scheduler_core.h): a step's results. Each sampled token is checked for the stop conditions and
// delivered; the choices that fork at a leader's first sample become sequences of their own; the executor's idle
// time between steps is counted.
#include "actors/scheduler/scheduler_core.h"

#include <algorithm>
#include <chrono>

#include "core/result.h"

namespace troupe {

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

bool scheduler_core::is_stop_token(const sequence_state& s, int32_t token) const {
    const auto& p = *s.params;
    if (!p.ignore_eos && std::find(config_.eog_ids.begin(), config_.eog_ids.end(), token) != config_.eog_ids.end())
        return true;
    return std::find(p.stop_tokens.begin(), p.stop_tokens.end(), token) != p.stop_tokens.end();
}

}  // namespace troupe
