// scheduler_core (scheduler_core.h): planning a step. make_request() asks the KV allocator for the running
// sequences' growth and the admissions; granted() turns its answer (preemptions, admissions, block tables) into the
// step_plan; plan() decides when to ask, planning ahead where the step in flight's outcome is sure enough.
#include "actors/scheduler/scheduler_core.h"

#include <algorithm>

#include "core/result.h"

namespace troupe {
namespace {

std::string too_big(int32_t n_tokens) {
    return "the KV cache cannot hold " + std::to_string(n_tokens) +
           " tokens for one sequence; raise kv.memory or lower max_tokens";
}

}  // namespace

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

}  // namespace troupe
