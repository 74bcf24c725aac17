#include "actors/scheduler/scheduler_core.h"

#include <algorithm>

#include "core/result.h"

namespace troupe {

void scheduler_output::clear() {
    reserve.clear();
    release.clear();
    retire.clear();
    deliveries.clear();
    failures.clear();
    step.reset();
}

scheduler_core::scheduler_core(scheduler_config config) : config_(std::move(config)) {
    TROUPE_ASSERT(config_.n_ctx > 0, "scheduler needs the context length");
    TROUPE_ASSERT(config_.max_running > 0 && config_.max_waiting > 0, "scheduler limits must be positive");
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
    } else if (static_cast<int32_t>(waiting_.size()) >= config_.max_waiting) {
        problem = "overloaded: " + std::to_string(waiting_.size()) + " requests are already waiting (limit " +
                  std::to_string(config_.max_waiting) + ")";
    }
    if (!problem.empty()) {
        out.failures.push_back({r.id, problem});
        return;
    }
    sequence_state s;
    s.id = r.id;
    s.prompt = r.prompt;
    s.params = r.params;
    s.t_submit = r.t_submit;
    seqs_.emplace(r.id, std::move(s));
    waiting_.push_back(r.id);
    schedule(out);
}

void scheduler_core::cancel(request_id id, scheduler_output& out) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) return;  // already finished, or never got here (then the tokenizer failed it)
    if (it->second.where == phase::reserving) {
        it->second.cancel_on_reply = true;
        return;
    }
    end(it->second, finish_reason::cancelled, out);
    schedule(out);
}

void scheduler_core::finish(request_id id, scheduler_output& out) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) return;
    if (it->second.where == phase::reserving) {
        it->second.cancel_on_reply = true;
        return;
    }
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
        auto it = seqs_.find(id);
        if (it == seqs_.end()) continue;
        if (it->second.where == phase::reserving) {
            // The grant still comes back and must be released; the client hears now.
            out.failures.push_back({id, message});
            it->second.cancel_on_reply = true;
            it->second.failed = true;
            continue;
        }
        out.failures.push_back({id, message});
        drop(id, out);
    }
    schedule(out);
}

void scheduler_core::abandon_step(int64_t step_id) {
    if (in_flight_ && in_flight_->step_id == step_id) in_flight_.reset();
}

void scheduler_core::granted(const blocks_granted& g, scheduler_output& out) {
    auto it = seqs_.find(g.seq_id);
    TROUPE_ASSERT(it != seqs_.end() && it->second.where == phase::reserving,
                  "blocks granted to sequence " + std::to_string(g.seq_id) + " that did not ask");
    reserving_ = false;
    sequence_state& s = it->second;
    if (s.cancel_on_reply) {
        s.where = phase::waiting;
        if (s.failed) {
            drop(s.id, out);
        } else {
            end(s, finish_reason::cancelled, out);
        }
        out.release.push_back({g.seq_id});  // drop() releases only running sequences' blocks
        schedule(out);
        return;
    }
    TROUPE_ASSERT(!waiting_.empty() && waiting_.front() == s.id, "granted sequence is not the queue's head");
    waiting_.pop_front();
    s.where = phase::running;
    s.t_admitted = steady_clock::now();
    s.block_table = std::make_shared<const std::vector<int32_t>>(g.block_table);
    s.n_covered = g.n_tokens_covered;
    s.pending.assign(s.prompt->begin(), s.prompt->end());
    running_.push_back(s.id);
    schedule(out);
}

void scheduler_core::refused(const blocks_refused& r, scheduler_output& out) {
    auto it = seqs_.find(r.seq_id);
    TROUPE_ASSERT(it != seqs_.end() && it->second.where == phase::reserving,
                  "blocks refused to sequence " + std::to_string(r.seq_id) + " that did not ask");
    reserving_ = false;
    sequence_state& s = it->second;
    s.where = phase::waiting;
    if (s.cancel_on_reply) {
        if (s.failed) {
            drop(s.id, out);
        } else {
            end(s, finish_reason::cancelled, out);
        }
    } else if (r.never_fits || running_.empty()) {
        // Nothing will ever free enough blocks for it.
        out.failures.push_back({s.id, "the KV cache cannot hold " + std::to_string(r.n_tokens) +
                                          " tokens for one sequence; lower max_tokens or the prompt"});
        drop(s.id, out);
    } else {
        blocked_on_kv_ = true;
    }
    schedule(out);
}

void scheduler_core::step_finished(const step_done& d, scheduler_output& out) {
    TROUPE_ASSERT(in_flight_ && in_flight_->step_id == d.step_id,
                  "step " + std::to_string(d.step_id) + " finished but was not in flight");
    step_record record = std::move(*in_flight_);
    in_flight_.reset();
    counters_.n_steps++;
    if (!d.error.empty()) {
        fail(record.ids, "step " + std::to_string(d.step_id) + " failed: " + d.error, out);
        return;
    }
    for (const sequence_result& r : d.results) {
        auto it = seqs_.find(r.seq_id);
        if (it == seqs_.end()) continue;  // cancelled or finished while the step ran
        consume(it->second, r, out);
    }
    schedule(out);
}

void scheduler_core::consume(sequence_state& s, const sequence_result& r, scheduler_output& out) {
    const auto& p = *s.params;
    // KV now holds the step's inputs and the accepted drafts; the last sampled token is pending.
    s.n_computed += s.n_step_inputs + r.n_accepted;
    s.pending.clear();
    counters_.n_drafted += r.n_drafted;
    counters_.n_accepted += r.n_accepted;

    token_delivery d;
    d.id = s.id;
    d.n_drafted = r.n_drafted;
    d.n_accepted = r.n_accepted;
    d.t_sampled = r.t_sampled;
    d.t_admitted = s.t_admitted;
    for (int32_t t : r.tokens) {
        s.n_generated++;
        d.n_counted++;
        counters_.n_tokens++;
        if (is_stop_token(s, t)) {
            d.finish = finish_reason::stop;
            break;
        }
        d.tokens.push_back(t);
        if (s.n_generated >= p.max_tokens) {
            d.finish = finish_reason::length;
            break;
        }
    }
    if (!d.finish && !r.tokens.empty()) {
        s.pending.push_back(r.tokens.back());
        if (s.n_computed >= config_.n_ctx) d.finish = finish_reason::context_full;
    }
    if (!d.finish) {
        TROUPE_ASSERT(s.n_computed + static_cast<int32_t>(s.pending.size()) <= s.n_covered,
                      "sequence " + std::to_string(s.id) + " outgrew its blocks");
    }
    std::optional<finish_reason> finish = d.finish;
    out.deliveries.push_back(std::move(d));
    if (finish) drop(s.id, out);
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
    d.t_admitted = s.where == phase::running ? s.t_admitted : s.t_submit;
    d.finish = reason;
    out.deliveries.push_back(std::move(d));
    drop(s.id, out);
}

void scheduler_core::drop(request_id id, scheduler_output& out) {
    auto it = seqs_.find(id);
    TROUPE_ASSERT(it != seqs_.end());
    if (it->second.where == phase::running) {
        out.release.push_back({id});
        out.retire.push_back(id);
        running_.erase(std::find(running_.begin(), running_.end(), id));
        blocked_on_kv_ = false;
    } else {
        auto w = std::find(waiting_.begin(), waiting_.end(), id);
        if (w != waiting_.end()) waiting_.erase(w);
    }
    seqs_.erase(it);
}

int32_t scheduler_core::reserve_for(const sequence_state& s) const {
    // Contiguous for now: everything the request can ever use, in one reservation.
    int64_t want = static_cast<int64_t>(s.prompt->size()) + s.params->max_tokens;
    return static_cast<int32_t>(std::min<int64_t>(want, config_.n_ctx));
}

void scheduler_core::admit_head(scheduler_output& out) {
    if (stopping_ || reserving_ || blocked_on_kv_ || waiting_.empty()) return;
    if (static_cast<int32_t>(running_.size()) >= config_.max_running) return;
    sequence_state& s = seqs_.at(waiting_.front());
    s.where = phase::reserving;
    reserving_ = true;
    out.reserve.push_back({s.id, reserve_for(s)});
}

std::optional<step_plan> scheduler_core::plan_step() {
    if (in_flight_ || running_.empty()) return std::nullopt;
    step_plan plan;
    plan.step_id = next_step_id_++;
    step_record record{plan.step_id, {}};
    for (request_id id : running_) {
        sequence_state& s = seqs_.at(id);
        step_sequence q;
        q.seq_id = id;
        q.tokens = s.pending;
        q.pos0 = s.n_computed;
        q.block_table = s.block_table;
        q.params = s.params;
        q.sample = true;
        const bool decode = s.n_generated > 0;
        if (decode && config_.max_draft > 0) {
            int32_t room = s.n_covered - (s.n_computed + static_cast<int32_t>(q.tokens.size()));
            int32_t left = s.params->max_tokens - s.n_generated - 1;  // the verified step adds one more
            q.max_draft = std::max(0, std::min({config_.max_draft, room, left}));
        }
        s.n_step_inputs = static_cast<int32_t>(q.tokens.size());
        plan.seqs.push_back(std::move(q));
        record.ids.push_back(id);
    }
    in_flight_ = std::move(record);
    return plan;
}

void scheduler_core::schedule(scheduler_output& out) {
    admit_head(out);
    if (auto plan = plan_step()) out.step = std::move(plan);
}

}  // namespace troupe
