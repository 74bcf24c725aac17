#include "actors/scheduler/scheduler_actor.h"

#include "actors/common/overloaded.h"

namespace troupe {

scheduler_actor::scheduler_actor(lane& home, scheduler_config config, int32_t capacity)
    : core_(std::move(config)),
      inbox_(
          home, "scheduler", capacity, [this](scheduler_msg& m) { handle(m); },
          [this](const scheduler_msg& m, const std::string& what) { on_failure(m, what); }) {}

void scheduler_actor::connect(mailbox<kv_allocator_msg>& kv, mailbox<executor_msg>& executor,
                              mailbox<streamer_msg>& streamer) {
    kv_ = &kv;
    executor_ = &executor;
    streamer_ = &streamer;
}

void scheduler_actor::handle(scheduler_msg& m) {
    out_.clear();
    std::visit(overloaded{
                   [&](enqueue_request& r) { core_.enqueue(r, out_); },
                   [&](cancel_request& c) { core_.cancel(c.id, out_); },
                   [&](finish_request& f) { core_.finish(f.id, out_); },
                   [&](abort_all& a) { core_.abort_all(a.reason, out_); },
                   [&](blocks_granted& g) { core_.granted(g, out_); },
                   [&](blocks_refused& r) { core_.refused(r, out_); },
                   [&](step_done& d) { core_.step_finished(d, out_); },
               },
               m);
    send(out_);
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
            for (auto& r : again.release) out.release.push_back(r);
            for (auto id : again.retire) out.retire.push_back(id);
            for (auto& r : again.reserve) out.reserve.push_back(r);
            if (again.step) out.step = std::move(again.step);
        }
    }
    for (auto& f : out.failures) streamer_->post(std::move(f));
    for (const auto& r : out.release) kv_->post(r);
    for (const auto& r : out.reserve) kv_->post(r);
    if (!out.retire.empty()) executor_->post(retire_sequences{std::move(out.retire)});
    if (out.step) executor_->post(std::move(*out.step));

    const auto& c = core_.counters();
    live_.n_steps.store(c.n_steps, std::memory_order_relaxed);
    live_.n_tokens.store(c.n_tokens, std::memory_order_relaxed);
    live_.n_drafted.store(c.n_drafted, std::memory_order_relaxed);
    live_.n_accepted.store(c.n_accepted, std::memory_order_relaxed);
    live_.n_waiting.store(static_cast<int64_t>(core_.n_waiting()), std::memory_order_relaxed);
    live_.n_running.store(static_cast<int64_t>(core_.n_running()), std::memory_order_relaxed);
}

void scheduler_actor::on_failure(const scheduler_msg& m, const std::string& what) {
    std::vector<request_id> ids;
    std::optional<int64_t> step;
    std::visit(overloaded{
                   [&](const enqueue_request& r) { ids.push_back(r.id); },
                   [&](const cancel_request& c) { ids.push_back(c.id); },
                   [&](const finish_request& f) { ids.push_back(f.id); },
                   [&](const abort_all&) {},
                   [&](const blocks_granted& g) { ids.push_back(g.seq_id); },
                   [&](const blocks_refused& r) { ids.push_back(r.seq_id); },
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
