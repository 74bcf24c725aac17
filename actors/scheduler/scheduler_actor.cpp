#include "actors/scheduler/scheduler_actor.h"

#include "actors/common/overloaded.h"

namespace troupe {

scheduler_actor::scheduler_actor(lane& home, scheduler_params config, int32_t capacity)
    : core_([&config] {
          config.plan_on_events = false;
          return std::move(config);
      }()),
      inbox_(
          home, "scheduler", capacity, [this](scheduler_msg& m) { handle(m); },
          [this](const scheduler_msg& m, const std::string& what) { on_failure(m, what); }) {}

void scheduler_actor::connect(mailbox<kv_allocator_msg>& kv_allocator, mailbox<executor_msg>& executor,
                              mailbox<streamer_msg>& streamer) {
    kv_allocator_ = &kv_allocator;
    executor_ = &executor;
    streamer_ = &streamer;
}

void scheduler_actor::handle(scheduler_msg& m) {
    out_.clear();
    const bool tick = std::holds_alternative<plan_tick>(m);
    if (tick) tick_pending_ = false;
    // A grant answers a plan: it makes the step (or finds none possible now) and asks for no other, except
    // the next step's, planned ahead while this one runs (through a tick, so queued inputs join it).
    const bool grant = std::holds_alternative<kv_step_grant>(m);
    std::visit(overloaded{
                   [&](enqueue_request& r) { core_.enqueue(r, out_); },
                   [&](cancel_request& c) { core_.cancel(c.id, out_); },
                   [&](finish_request& f) { core_.finish(f.id, out_); },
                   [&](abort_all& a) { core_.abort_all(a.reason, out_); },
                   [&](step_done& d) { core_.step_finished(d, out_); },
                   [&](plan_tick&) { core_.plan(out_); },
                   [&](kv_step_grant& g) { core_.granted(g, out_); },
               },
               m);
    const bool stepped = out_.step.has_value();
    send(out_);
    const bool ahead = grant && stepped && core_.can_plan_ahead();
    if (!tick && (!grant || ahead) && !tick_pending_ && core_.wants_step()) {
        tick_pending_ = true;
        inbox_.post(plan_tick{});
    }
}

void scheduler_actor::send(scheduler_output& out) {
    // Deliveries first: on a shared lane they then run before the next step's forward.
    if (!out.deliveries.empty()) {
        std::vector<request_id> ids;
        for (const auto& d : out.deliveries) ids.push_back(d.id);
        if (!streamer_->try_post(deliver_tokens{std::move(out.deliveries)})) {
            const std::string why = "overloaded: the streamer's mailbox is full (" +
                                    std::to_string(streamer_->stats().capacity) +
                                    " deliveries); the client is not reading fast enough";
            scheduler_output again;
            std::vector<request_id> live;
            for (request_id id : ids) {
                if (core_.knows(id)) {
                    live.push_back(id);
                } else {
                    streamer_->post(fail_stream{id, why});  // it ended in this delivery
                }
            }
            core_.fail(live, why, again);
            // The next step was planned with them: take them out (their retire is posted first).
            if (out.step) {
                auto& seqs = out.step->seqs;
                std::erase_if(seqs, [&](const step_sequence& q) { return !core_.knows(q.seq_id); });
                if (seqs.empty()) {
                    core_.abandon_step(out.step->step_id);
                    out.step.reset();
                }
            }
            for (auto& f : again.failures) out.failures.push_back(std::move(f));
            for (auto id : again.retire) out.retire.push_back(id);
            if (again.step) out.step = std::move(again.step);
            if (again.kv_request) out.kv_request = std::move(again.kv_request);
        }
    }
    for (auto& f : out.failures) streamer_->post(std::move(f));
    if (!out.retire.empty()) executor_->post(retire_sequences{std::move(out.retire)});
    if (out.step) {
        last_sent_step_ = out.step->step_id;
        executor_->post(std::move(*out.step));
    }
    if (out.kv_request) {
        out.kv_request->last_sent_step = last_sent_step_;
        kv_allocator_->post(std::move(*out.kv_request));
    }

    const auto& c = core_.counters();
    live_.n_steps.store(c.n_steps, std::memory_order_relaxed);
    live_.n_tokens.store(c.n_tokens, std::memory_order_relaxed);
    live_.n_drafted.store(c.n_drafted, std::memory_order_relaxed);
    live_.n_accepted.store(c.n_accepted, std::memory_order_relaxed);
    live_.n_waiting.store(static_cast<int64_t>(core_.n_waiting()), std::memory_order_relaxed);
    live_.n_running.store(static_cast<int64_t>(core_.n_running()), std::memory_order_relaxed);
    live_.n_preemptions.store(c.n_preemptions, std::memory_order_relaxed);
    live_.n_prompt_tokens.store(c.n_prompt_tokens, std::memory_order_relaxed);
    publish();
}

void scheduler_actor::publish() {
    const time_point now = steady_clock::now();
    const auto& c = core_.counters();
    if (c.n_steps > published_steps_) {
        published_steps_ = c.n_steps;
        recent_steps_.push_back({now, c.last_batch_size, c.last_batch_tokens});
    }
    while (!recent_steps_.empty() && now - recent_steps_.front().when > std::chrono::minutes(1))
        recent_steps_.pop_front();
    // The request list costs O(requests): refresh it at most every 5 ms (cheap for a busy engine).
    const bool list = now - last_publish_ > std::chrono::milliseconds(5) || core_.n_running() + core_.n_waiting() < 8;
    std::lock_guard lock(view_mutex_);
    if (list) {
        core_.view(requests_, now);
        last_publish_ = now;
    }
    const kv_pool_view& ps = core_.kv_pool();  // as the KV allocator reported it with the last grant
    kv_view_.block_size = ps.block_size;
    kv_view_.n_blocks = ps.n_blocks;
    kv_view_.n_used = ps.n_used;
    kv_view_.n_cached = ps.n_cached;
    kv_view_.n_free = ps.n_free;
    kv_view_.n_prefix_queries = ps.n_prefix_queries;
    kv_view_.n_prefix_hits = ps.n_prefix_hits;
    kv_view_.prefix_hit_rate =
        ps.n_prefix_queries > 0 ? static_cast<double>(ps.n_prefix_hits) / static_cast<double>(ps.n_prefix_queries) : 0;
    kv_view_.n_preemptions = c.n_preemptions;
    step_view_.n_steps = c.n_steps;
    step_view_.last_batch_size = c.last_batch_size;
    step_view_.last_batch_tokens = c.last_batch_tokens;
    double seqs = 0, toks = 0;
    for (const auto& r : recent_steps_) {
        seqs += r.n_seqs;
        toks += r.n_tokens;
    }
    const double n = static_cast<double>(recent_steps_.size());
    step_view_.mean_batch_size = n > 0 ? seqs / n : 0;
    step_view_.mean_batch_tokens = n > 0 ? toks / n : 0;
    step_view_.n_steps_ahead = c.n_steps_ahead;
    step_view_.n_idle_gaps = c.n_idle_gaps;
    step_view_.executor_idle_s = c.executor_idle_s;
    step_view_.executor_busy_s = c.executor_busy_s;
    step_view_.executor_idle_max_s = c.executor_idle_max_s;
    step_view_.n_prefill_tokens = c.n_prefill_tokens;
    step_view_.n_forks = c.n_forks;
    step_view_.n_forked_prompt_tokens = c.n_forked_prompt_tokens;

    const draft_controller& dc = core_.drafts();
    spec_view& sp = spec_view_;
    sp.max_draft = core_.config().max_draft;
    sp.adaptive = core_.config().adaptive_draft && sp.max_draft > 0;
    sp.draft_cap = c.draft_cap;
    sp.n_draft_steps = c.n_draft_steps;
    sp.n_drafted = c.n_drafted;
    sp.n_draft_nodes = c.n_draft_nodes;
    sp.n_accepted = c.n_accepted;
    const auto per = [](int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; };
    sp.acceptance_rate = per(c.n_accepted, c.n_drafted);
    sp.acceptance_length = c.n_draft_steps > 0 ? 1.0 + per(c.n_accepted, c.n_draft_steps) : 0.0;
    sp.draft_length = per(c.n_drafted, c.n_draft_steps);
    sp.n_steps_on = dc.counters().n_steps_on;
    sp.n_steps_off = dc.counters().n_steps_off;
    sp.n_probes = dc.counters().n_probes;
    sp.n_switches = dc.counters().n_switches;
    sp.tokens_per_s_drafting = dc.rate_with_drafts(c.last_batch_size);
    sp.tokens_per_s_plain = dc.rate_without_drafts(c.last_batch_size);
}

void scheduler_actor::view(std::vector<request_view>& requests, kv_view& kv, step_view& steps, spec_view& spec) const {
    std::lock_guard lock(view_mutex_);
    requests = requests_;
    kv = kv_view_;
    steps = step_view_;
    spec = spec_view_;
}

void scheduler_actor::on_failure(const scheduler_msg& m, const std::string& what) {
    std::vector<request_id> ids;
    std::optional<int64_t> step;
    std::visit(overloaded{
                   [&](const enqueue_request& r) { ids.push_back(r.id); },
                   [&](const cancel_request& c) { ids.push_back(c.id); },
                   [&](const finish_request& f) { ids.push_back(f.id); },
                   [&](const abort_all&) {},
                   [&](const plan_tick&) { tick_pending_ = false; },
                   [&](const kv_step_grant& g) {
                       core_.abandon_request(g.step_id);
                       for (const auto& q : g.seqs) ids.push_back(q.seq_id);
                       for (const auto& a : g.admitted) ids.push_back(a.seq_id);
                   },
                   [&](const step_done& d) {
                       step = d.step_id;
                       for (const auto& r : d.results) ids.push_back(r.seq_id);
                   },
               },
               m);
    out_.clear();
    if (step) core_.abandon_step(*step);
    std::vector<request_id> known;
    for (request_id id : ids) {
        if (core_.knows(id)) {
            known.push_back(id);
        } else if (std::holds_alternative<enqueue_request>(m)) {
            out_.failures.push_back({id, "scheduler: " + what});
        }
    }
    core_.fail(known, "scheduler: " + what, out_);
    send(out_);
}

}  // namespace troupe
