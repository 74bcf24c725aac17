// scheduler_core (scheduler_core.h): requests arriving and leaving (enqueue, cancel, finish, failures) and the
// snapshot view. Planning a step is in scheduler_core_plan.cpp, a step's results in scheduler_core_results.cpp.
#include "actors/scheduler/scheduler_core.h"

#include <algorithm>

#include "core/result.h"

namespace troupe {
namespace {

kv_geometry geometry_of(const scheduler_params& c) {
    if (c.kv.block_size > 0 && c.kv.n_blocks > 0) return c.kv;
    return kv_geometry{c.n_ctx, c.max_running};  // contiguous: one block of the context per sequence
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
