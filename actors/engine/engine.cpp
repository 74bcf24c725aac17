#include "actors/engine/engine.h"

#include "actors/executor/executor_actor.h"
#include "actors/kv_allocator/kv_allocator_actor.h"
#include "actors/scheduler/scheduler_actor.h"
#include "actors/streamer/streamer_actor.h"
#include "actors/tokenizer/tokenizer_actor.h"
#include "core/log/log.h"
#include "core/runtime/lane.h"
#include "core/runtime/step_fences.h"

namespace troupe {
namespace {
// Control messages are not counted against capacity; these mailboxes only ever receive control
// messages, so the number is only what their stats report.
constexpr int32_t k_control_only_capacity = 1;
}  // namespace

engine::engine(engine_parts parts, engine_params params) : params_(params) {
    auto make = [this](const char* name) {
        owned_lanes_.push_back(std::make_unique<lane>(name));
        return owned_lanes_.back().get();
    };
    switch (params.lanes) {
        case lane_layout::one_lane: {
            lane* l = make("lane");
            build(std::move(parts), params, l, l, l, l, l);
            break;
        }
        case lane_layout::control_and_compute: {
            lane* control = make("control");
            lane* compute = make("compute");
            // The KV allocator shares the scheduler's thread: a round trip is two posts, a few us.
            build(std::move(parts), params, control, control, control, compute, control);
            break;
        }
        case lane_layout::lane_per_actor: {
            lane* tok = make("tokenizer");
            lane* sched = make("scheduler");
            lane* kv = make("kv_allocator");
            lane* exec = make("executor");
            lane* stream = make("streamer");
            build(std::move(parts), params, tok, sched, kv, exec, stream);
            break;
        }
    }
}

engine::engine(engine_parts parts, engine_params params, lane& manual) : params_(params), manual_(&manual) {
    build(std::move(parts), params, &manual, &manual, &manual, &manual, &manual);
}

void engine::build(engine_parts parts, const engine_params& params, lane* tok, lane* sched, lane* kv, lane* exec,
                   lane* stream) {
    TROUPE_ASSERT(parts.runner != nullptr && parts.codec != nullptr, "engine needs a model runner and a codec");
    description_ = parts.runner->description();
    if (parts.spec && params.max_draft > 0) spec_name_ = parts.spec->name();
    bytes_per_token_ = parts.runner->kv_bytes_per_token();
    scheduler_params sc;
    sc.max_waiting = params.max_waiting;
    sc.max_running = params.max_running;
    sc.n_ctx = parts.runner->n_ctx();
    sc.max_draft = parts.spec ? params.max_draft : 0;
    sc.adaptive_draft = params.adaptive_draft;
    sc.eog_ids = parts.codec->eog_ids();
    sc.max_batched_tokens = std::max(params.max_batched_tokens, 1);
    sc.kv = parts.runner->kv();
    sc.prefix_caching = params.prefix_caching;
    sc.kv_group_windows = parts.runner->kv_group_windows();
    sc.policy = params.policy;
    sc.plan_ahead = params.plan_ahead;
    sc.preemption = params.preemption;
    sc.can_swap = parts.runner->separate_kv_memory();
    // Choices fork where the runner copies blocks (an empty copy answers whether it can) in host memory, where the KV
    // allocator's lane makes the copies synchronously (kv_copy_lane.h); forks on a device are not tested yet.
    sc.can_fork = !sc.can_swap && parts.runner->copy_blocks({}, {}).ok();
    auto codec = parts.codec;
    const kv_allocator_params kv_params = kv_allocator_params_from(sc);

    // On a GPU the executor's lane owns the compute stream and the KV allocator's lane the copy stream; the two are
    // then ordered by events only (kv_copy_lane.h). Where both actors share one lane it keeps the compute stream, and
    // the runner orders its own copies as before.
    fences_ = std::make_shared<step_fences>();
    if (auto compute = parts.runner->lane_stream(lane_role::compute)) exec->attach_stream(std::move(compute));
    device_stream* copy_stream = nullptr;
    if (kv != exec) {
        if (auto copies = parts.runner->lane_stream(lane_role::kv_copy); copies && kv->attach_stream(copies)) {
            copy_stream = copies.get();
        }
    }
    if (copy_stream != nullptr && exec->stream() != nullptr) parts.runner->order_steps(fences_);
    auto copies = std::make_unique<kv_copy_lane>(parts.runner, copy_stream, fences_, kv_params.kv.n_blocks);

    tokenizer_ = std::make_unique<tokenizer_actor>(*tok, parts.codec, params.submit_capacity);
    kv_allocator_ = std::make_unique<kv_allocator_actor>(*kv, kv_params, k_control_only_capacity, std::move(copies));
    scheduler_ = std::make_unique<scheduler_actor>(*sched, std::move(sc), params.scheduler_capacity);
    executor_ = std::make_unique<executor_actor>(
        *exec, std::move(parts.runner), std::move(parts.spec), k_control_only_capacity,
        [codec](int32_t id) { return codec->piece(id); }, fences_);
    streamer_ = std::make_unique<streamer_actor>(
        *stream, parts.codec, &overhead_, [this](request_id id, request_outcome o) { on_request_end(id, o); },
        params.streamer_capacity);

    tokenizer_->connect(scheduler_->inbox(), streamer_->inbox());
    streamer_->set_timing_fn([this](const usage& u, const timings& t) { window_.record(u, t, steady_clock::now()); });
    scheduler_->connect(kv_allocator_->inbox(), executor_->inbox(), streamer_->inbox());
    kv_allocator_->connect(scheduler_->inbox());
    executor_->connect(scheduler_->inbox());
    streamer_->connect(scheduler_->inbox());
}

engine::~engine() {
    if (!stopped_.load() && (accepting_.load() || draining_.load())) (void)stop(std::chrono::milliseconds(0));
    if (fences_) fences_->close("the engine stopped");
    for (auto& l : owned_lanes_) l->stop();
}

status engine::start() {
    if (stopped_.load()) return make_error("engine: start() after stop()");
    if (draining_.load()) return make_error("engine: start() after drain()");
    if (accepting_.exchange(true)) return make_error("engine: started twice");
    for (auto& l : owned_lanes_) l->start();
    if (manual_ != nullptr) {
        TROUPE_LOG_INFO("engine", "started: %s, on the caller's lane", description_.c_str());
    } else {
        TROUPE_LOG_INFO("engine", "started: %s, %zu lanes", description_.c_str(), owned_lanes_.size());
    }
    return status::success();
}

result<request_id> engine::submit(request r, request_sink sink) {
    if (!accepting_.load()) {
        n_refused_.fetch_add(1);
        if (stopped_.load()) return make_error("engine is stopping: no new requests");
        if (draining_.load()) return make_error("engine is draining: no new requests");
        return make_error("engine is not started");
    }
    const request_id id = next_id_.fetch_add(1);
    submit_request m;
    m.id = id;
    m.prompt = std::move(r.prompt);
    m.prompt_ids = std::move(r.prompt_ids);
    m.params = std::make_shared<const sampling_params>(std::move(r.sampling));
    m.sink = std::make_shared<const request_sink>(std::move(sink));
    m.t_submit = steady_clock::now();
    m.logprobs = r.logprobs;
    m.prompt_logprobs = r.prompt_logprobs && r.logprobs >= 0;
    m.n_forks = std::max(r.n_forks, 0);
    m.fork_of = r.fork_of;
    n_in_flight_.fetch_add(1);
    if (!tokenizer_->inbox().try_post(std::move(m))) {
        n_in_flight_.fetch_sub(1);
        n_refused_.fetch_add(1);
        return make_error("overloaded: " + std::to_string(params_.submit_capacity) +
                          " requests are waiting to be tokenized; retry later");
    }
    n_submitted_.fetch_add(1);
    return id;
}

void engine::cancel(request_id id) {
    tokenizer_->inbox().post(cancel_request{id});
}

void engine::on_request_end(request_id, request_outcome outcome) {
    switch (outcome) {
        case request_outcome::done:
            n_completed_.fetch_add(1);
            break;
        case request_outcome::cancelled:
            n_cancelled_.fetch_add(1);
            break;
        case request_outcome::failed:
            n_failed_.fetch_add(1);
            break;
    }
    if (n_in_flight_.fetch_sub(1) == 1) {
        std::lock_guard lock(idle_mutex_);
        idle_cv_.notify_all();
    }
}

bool engine::wait_idle(steady_clock::time_point deadline) {
    if (manual_ != nullptr) {
        while (n_in_flight_.load() > 0 && steady_clock::now() < deadline) {
            if (manual_->run_until_idle() == 0) break;
        }
        return n_in_flight_.load() == 0;
    }
    std::unique_lock lock(idle_mutex_);
    return idle_cv_.wait_until(lock, deadline, [this] { return n_in_flight_.load() == 0; });
}

status engine::stop(std::chrono::milliseconds drain_timeout) {
    if (stopped_.exchange(true)) return status::success();
    accepting_.store(false);
    tokenizer_->inbox().close();
    const int64_t n_at_stop = n_in_flight_.load();
    bool drained = wait_idle(steady_clock::now() + drain_timeout);
    int64_t n_failed_by_stop = 0;
    if (!drained) {
        n_failed_by_stop = n_in_flight_.load();
        const std::string reason = "engine stopped: the drain timeout of " + std::to_string(drain_timeout.count()) +
                                   " ms ran out before this request finished";
        tokenizer_->inbox().post(abort_all{reason});
        if (!wait_idle(steady_clock::now() + std::chrono::seconds(2))) {
            streamer_->inbox().post(close_all{reason});
            (void)wait_idle(steady_clock::now() + std::chrono::seconds(2));
        }
    }
    fences_->close("the engine stopped");  // a KV copy still waiting for a step gives up
    for (auto& l : owned_lanes_) l->stop();
    if (manual_ != nullptr) manual_->run_until_idle();
    TROUPE_LOG_INFO("engine", "stopped: %lld requests in flight at stop, %lld failed by the drain timeout",
                    static_cast<long long>(n_at_stop), static_cast<long long>(n_failed_by_stop));
    if (n_failed_by_stop > 0) {
        return make_error("engine stopped with " + std::to_string(n_failed_by_stop) +
                          " requests unfinished after the drain timeout of " + std::to_string(drain_timeout.count()) +
                          " ms; they were failed");
    }
    return status::success();
}

engine_stats engine::stats() const {
    engine_stats s;
    s.n_submitted = n_submitted_.load();
    s.n_refused = n_refused_.load();
    s.n_completed = n_completed_.load();
    s.n_cancelled = n_cancelled_.load();
    s.n_failed = n_failed_.load();
    s.n_in_flight = n_in_flight_.load();
    const auto& c = scheduler_->counters();
    s.n_waiting = c.n_waiting.load();
    s.n_running = c.n_running.load();
    s.n_steps = c.n_steps.load();
    s.n_tokens = c.n_tokens.load();
    s.n_drafted = c.n_drafted.load();
    s.n_draft_accepted = c.n_accepted.load();
    s.draft_acceptance =
        s.n_drafted > 0 ? static_cast<double>(s.n_draft_accepted) / static_cast<double>(s.n_drafted) : 0;
    s.token_overhead = overhead_.summary();
    s.mailboxes = {tokenizer_->inbox().stats(), scheduler_->inbox().stats(), kv_allocator_->inbox().stats(),
                   executor_->inbox().stats(), streamer_->inbox().stats()};
    s.n_preemptions = c.n_preemptions.load();
    return s;
}

void engine::drain() {
    if (draining_.exchange(true)) return;
    const bool was = accepting_.exchange(false);
    if (was)
        TROUPE_LOG_INFO("engine", "draining: %lld requests in flight", static_cast<long long>(n_in_flight_.load()));
}

engine_snapshot engine::snapshot() const {
    engine_snapshot s;
    const time_point now = steady_clock::now();
    s.accepting = accepting_.load();
    scheduler_->view(s.requests, s.kv, s.steps, s.spec);
    s.spec.plugin = spec_name_;
    s.kv.bytes_per_block = bytes_per_token_ * static_cast<uint64_t>(s.kv.block_size);
    const window_figures f = window_.figures(now);
    s.ttft_ms = f.ttft_ms;
    s.tpot_ms = f.tpot_ms;
    s.e2e_ms = f.e2e_ms;
    s.tokens_per_s = f.tokens_per_s;
    s.requests_per_s = f.requests_per_s;
    s.n_completed = n_completed_.load();
    s.n_failed = n_failed_.load();
    s.n_cancelled = n_cancelled_.load();
    s.n_refused = n_refused_.load();
    const auto& c = scheduler_->counters();
    s.n_generated_tokens = c.n_tokens.load();
    {
        std::lock_guard lock(rate_mutex_);
        token_samples_.emplace_back(now, s.n_generated_tokens);
        while (token_samples_.size() > 2 && now - token_samples_[1].first >= std::chrono::minutes(1)) {
            token_samples_.pop_front();
        }
        const double span_s = std::chrono::duration<double>(now - token_samples_.front().first).count();
        if (span_s >= 0.5)
            s.tokens_per_s = static_cast<double>(s.n_generated_tokens - token_samples_.front().second) / span_s;
    }
    s.n_prompt_tokens = c.n_prompt_tokens.load();
    return s;
}

std::string engine::description() const {
    return description_;
}

}  // namespace troupe
