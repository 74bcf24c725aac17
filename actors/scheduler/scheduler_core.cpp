#include "actors/scheduler/scheduler_core.h"

#include <algorithm>

#include "core/result.h"

namespace troupe {
namespace {

kv_geometry geometry_of(const scheduler_params& c) {
    if (c.kv.block_size > 0 && c.kv.n_blocks > 0) return c.kv;
    return kv_geometry{c.n_ctx, c.max_running};  // contiguous: one block of the context per sequence
}

}  // namespace

void scheduler_output::clear() {
    retire.clear();
    swaps.clear();
    deliveries.clear();
    failures.clear();
    step.reset();
}

scheduler_core::scheduler_core(scheduler_params config)
    : config_(std::move(config)), pool_(geometry_of(config_), config_.prefix_caching) {
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
    } else if (pool_.blocks_for(n_prompt + 1) > pool_.n_blocks()) {
        problem = "the KV cache cannot hold " + std::to_string(n_prompt + 1) + " tokens for one sequence (" +
                  std::to_string(pool_.n_blocks()) + " blocks of " + std::to_string(pool_.block_size()) +
                  "); raise kv.memory or shorten the prompt";
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
    s.params = r.params;
    s.t_submit = r.t_submit;
    s.tokens.assign(r.prompt->begin(), r.prompt->end());
    s.n_prompt = n_prompt;
    s.logprobs = r.logprobs;
    seqs_.emplace(r.id, std::move(s));
    waiting_.push_back(r.id);
    schedule(out);
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
    if (in_flight_ && in_flight_->step_id == step_id) in_flight_.reset();
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
    plan(out);  // always at once: the executor is waiting for the next step
}

void scheduler_core::consume(sequence_state& s, const sequence_result& r, scheduler_output& out) {
    const auto& p = *s.params;
    // KV now holds the step's inputs and the accepted drafts.
    s.n_computed += s.n_step_inputs + r.n_accepted;
    pool_.computed(s.id, s.n_computed);
    s.fresh = false;
    if (!s.step_samples) return;  // a prefill chunk: nothing sampled
    counters_.n_drafted += r.n_drafted;
    counters_.n_accepted += r.n_accepted;

    token_delivery d;
    d.id = s.id;
    d.n_drafted = r.n_drafted;
    d.n_accepted = r.n_accepted;
    d.t_sampled = r.t_sampled;
    d.t_admitted = s.t_admitted;
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
    pool_.release(id);
    if (it->second.ever_admitted) out.retire.push_back(id);
    if (it->second.where == phase::running) {
        running_.erase(std::find(running_.begin(), running_.end(), id));
    } else {
        auto w = std::find(waiting_.begin(), waiting_.end(), id);
        if (w != waiting_.end()) waiting_.erase(w);
    }
    seqs_.erase(it);
}

bool scheduler_core::preempt_last(scheduler_output& out) {
    if (running_.empty()) return false;
    const request_id id = running_.back();
    sequence_state& s = seqs_.at(id);
    running_.pop_back();
    const bool swap = config_.preemption == preemption_mode::swap && config_.can_swap && s.n_computed > 0;
    if (swap) {
        out.swaps.push_back({id, true, pool_.table(id), s.n_computed});
        s.swapped = true;
    } else {
        s.n_computed = 0;  // recompute: every known token is pending again
    }
    pool_.release(id);
    s.where = phase::waiting;
    s.fresh = true;
    s.n_preemptions++;
    counters_.n_preemptions++;
    waiting_.push_front(id);
    return true;
}

int32_t scheduler_core::max_cached_tokens(const sequence_state& s) const {
    // Whole blocks only, and at least one token left to run (its logits give the next token).
    const int32_t bs = pool_.block_size();
    return ((static_cast<int32_t>(s.tokens.size()) - 1) / bs) * bs;
}

void scheduler_core::add_to_plan(sequence_state& s, int32_t n_tokens, int32_t max_draft, step_plan& plan,
                                 step_record& record) {
    step_sequence q;
    q.seq_id = s.id;
    q.pos0 = s.n_computed;
    q.tokens.assign(s.tokens.begin() + s.n_computed, s.tokens.begin() + s.n_computed + n_tokens);
    q.block_table = std::make_shared<const std::vector<int32_t>>(pool_.table(s.id));
    q.params = s.params;
    q.sample = s.n_computed + n_tokens == static_cast<int32_t>(s.tokens.size());
    q.max_draft = q.sample ? max_draft : 0;
    q.logprobs = s.logprobs;
    if (s.fresh && s.n_computed > 0) {
        q.context = std::make_shared<const std::vector<int32_t>>(s.tokens.begin(), s.tokens.begin() + s.n_computed);
    }
    pool_.commit(s.id, s.tokens, s.n_computed + n_tokens);
    s.n_step_inputs = n_tokens;
    s.step_samples = q.sample;
    counters_.last_batch_tokens += n_tokens + q.max_draft;
    plan.seqs.push_back(std::move(q));
    record.ids.push_back(s.id);
}

bool scheduler_core::admit_head(int32_t& budget, step_plan& plan, step_record& record, scheduler_output& out) {
    // The static baseline admits its whole batch at once; the first chunks then wait for budget.
    if (waiting_.empty() || (budget <= 0 && config_.policy == batching_policy::continuous)) return false;
    if (static_cast<int32_t>(running_.size()) >= config_.max_running) return false;
    sequence_state& s = seqs_.at(waiting_.front());
    const int32_t n_known = static_cast<int32_t>(s.tokens.size());
    if (pool_.blocks_for(std::min(n_known + 1, config_.n_ctx)) > pool_.n_blocks()) {
        // A preempted sequence that grew past what the whole pool holds: it can never resume.
        out.failures.push_back({s.id, "the KV cache cannot hold " + std::to_string(n_known + 1) +
                                          " tokens for one sequence; raise kv.memory or lower max_tokens"});
        drop(s.id, out);
        return true;
    }
    if (s.swapped) {
        // Back from host memory: blocks for what was computed, then the copy in before the step.
        if (pool_.blocks_for(n_known + 1) > pool_.n_free()) return false;
        pool_.allocate(s.id, s.n_computed);
        out.swaps.push_back({s.id, false, pool_.table(s.id), s.n_computed});
        s.swapped = false;
    } else {
        const prefix_match peek = pool_.peek_prefix(s.tokens, max_cached_tokens(s));
        if (peek.n_pending > 0) return false;  // shares a block being computed now: next step
        // Blocks for the whole prompt (and the first sampled token) must be free, so an admitted
        // prefill is not preempted by its own later chunks.
        const int32_t need = pool_.blocks_for(n_known + 1) - peek.n_hits;
        if (need > pool_.n_free() - peek.n_idle_hits) return false;
        const prefix_match m = pool_.match_prefix(s.id, s.tokens, max_cached_tokens(s));
        s.n_computed = m.n_tokens;
        s.n_cached = m.n_tokens;
        if (!s.ever_admitted) {
            counters_.n_prompt_tokens += s.n_prompt;
            counters_.n_cached_prompt_tokens += std::min(m.n_tokens, s.n_prompt);
        }
    }
    waiting_.pop_front();
    s.where = phase::running;
    if (!s.ever_admitted) s.t_admitted = steady_clock::now();
    s.ever_admitted = true;
    running_.push_back(s.id);
    const int32_t chunk = std::min(s.pending(), std::max(0, budget));
    const bool ok = pool_.allocate(s.id, s.n_computed + chunk);
    TROUPE_ASSERT(ok, "admitted sequence " + std::to_string(s.id) + " but its first chunk does not fit");
    if (chunk > 0) add_to_plan(s, chunk, 0, plan, record);
    budget -= chunk;
    return true;
}

std::optional<step_plan> scheduler_core::plan_step(scheduler_output& out) {
    if (in_flight_) return std::nullopt;
    step_plan plan;
    step_record record;
    int32_t budget = config_.max_batched_tokens;
    counters_.last_batch_tokens = 0;
    bool preempted = false;

    // 1. Decodes, in admission order; blocks run out -> preempt from the back.
    for (size_t i = 0; i < running_.size(); ++i) {
        sequence_state& s = seqs_.at(running_[i]);
        if (s.pending() != 1 || budget <= 0) continue;
        int32_t max_draft = 0;
        if (config_.max_draft > 0 && s.n_generated > 0) {
            const int32_t left = s.params->max_tokens - s.n_generated - 1;  // the verified step adds one more
            const int32_t room = config_.n_ctx - (s.n_computed + 1);
            max_draft = std::max(0, std::min({config_.max_draft, left, room, budget - 1}));
        }
        bool placed = false;
        while (true) {
            if (max_draft > 0 && pool_.allocate(s.id, s.n_computed + 1 + max_draft)) {
                placed = true;
                break;
            }
            max_draft = 0;
            if (pool_.allocate(s.id, s.n_computed + 1)) {
                placed = true;
                break;
            }
            const bool self = running_.back() == s.id;
            if (self && running_.size() == 1) {
                out.failures.push_back({s.id, "the KV cache cannot hold " + std::to_string(s.n_computed + 1) +
                                                  " tokens for one sequence; raise kv.memory or lower max_tokens"});
                drop(s.id, out);
                --i;
                break;
            }
            preempt_last(out);
            preempted = true;
            if (self) break;
        }
        if (!placed) continue;
        add_to_plan(s, 1, max_draft, plan, record);
        budget -= 1 + max_draft;
    }

    // 2. Prefill chunks of admitted prompts.
    for (request_id id : running_) {
        sequence_state& s = seqs_.at(id);
        if (s.pending() <= 1 || budget <= 0) continue;
        int32_t chunk = std::min(s.pending(), budget);
        const int32_t have = static_cast<int32_t>(pool_.table(id).size()) * pool_.block_size();
        const int32_t fits = have + pool_.n_free() * pool_.block_size() - s.n_computed;
        chunk = std::min(chunk, fits);
        if (chunk <= 0) continue;
        pool_.allocate(id, s.n_computed + chunk);
        add_to_plan(s, chunk, 0, plan, record);
        budget -= chunk;
    }

    // 3. Admission, FCFS.
    const bool may_admit = config_.policy == batching_policy::continuous || running_.empty();
    if (may_admit && !preempted && !stopping_) {
        while (admit_head(budget, plan, record, out)) {
        }
    }

    if (plan.seqs.empty()) {
        // Nothing can run: the running prefills wait for blocks held by each other. Free the latest.
        if (running_.size() > 1) {
            preempt_last(out);
            return plan_step(out);
        }
        return std::nullopt;
    }
    plan.step_id = next_step_id_++;
    record.step_id = plan.step_id;
    counters_.last_batch_size = static_cast<int32_t>(plan.seqs.size());
    in_flight_ = std::move(record);
    return plan;
}

void scheduler_core::schedule(scheduler_output& out) {
    if (config_.plan_on_events) plan(out);
}

void scheduler_core::plan(scheduler_output& out) {
    if (auto p = plan_step(out)) out.step = std::move(p);
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
        v.n_kv_blocks = static_cast<int32_t>(pool_.table(id).size());
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
