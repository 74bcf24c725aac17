// scheduler_kv_loop: scheduler_core and kv_allocator_core joined synchronously, for the step-by-step
// tables and offline figures (no actors, no Asio). Every input goes to the scheduler; each
// kv_step_request it makes is answered by the allocator at once, as the two actors would by messages.
#pragma once

#include <string>
#include <vector>

#include "actors/kv_allocator/kv_allocator_core.h"
#include "actors/scheduler/scheduler_core.h"

namespace troupe {

class scheduler_kv_loop {
public:
    explicit scheduler_kv_loop(scheduler_params config)
        : kv_(kv_allocator_params_from(config)), scheduler_(std::move(config)) {}

    void enqueue(const enqueue_request& r, scheduler_output& out) {
        scheduler_.enqueue(r, out);
        settle(out);
    }
    void cancel(request_id id, scheduler_output& out) {
        scheduler_.cancel(id, out);
        settle(out);
    }
    void finish(request_id id, scheduler_output& out) {
        scheduler_.finish(id, out);
        settle(out);
    }
    void abort_all(const std::string& reason, scheduler_output& out) {
        scheduler_.abort_all(reason, out);
        settle(out);
    }
    void step_finished(const step_done& d, scheduler_output& out) {
        scheduler_.step_finished(d, out);
        settle(out);
    }
    void fail(const std::vector<request_id>& ids, const std::string& message, scheduler_output& out) {
        scheduler_.fail(ids, message, out);
        settle(out);
    }
    void abandon_step(int64_t step_id) { scheduler_.abandon_step(step_id); }
    void plan(scheduler_output& out) {
        scheduler_.plan(out);
        settle(out);
    }

    size_t n_waiting() const { return scheduler_.n_waiting(); }
    size_t n_running() const { return scheduler_.n_running(); }
    bool knows(request_id id) const { return scheduler_.knows(id); }
    const scheduler_counters& counters() const { return scheduler_.counters(); }
    const kv_group_pool& pool() const { return kv_.pool(); }
    const scheduler_core& scheduler() const { return scheduler_; }
    // kv_step_request / kv_step_grant round trips so far.
    int64_t n_round_trips() const { return n_round_trips_; }
    // Every grant so far, in order (the swaps and copies the KV allocator's lane would run).
    const std::vector<kv_step_grant>& grants() const { return grants_; }

private:
    void settle(scheduler_output& out) {
        while (out.kv_request) {
            const kv_step_request r = std::move(*out.kv_request);
            out.kv_request.reset();
            n_round_trips_++;
            grants_.push_back(kv_.grant(r));
            scheduler_.granted(grants_.back(), out);
        }
    }

    kv_allocator_core kv_;
    scheduler_core scheduler_;
    int64_t n_round_trips_ = 0;
    std::vector<kv_step_grant> grants_;
};

}  // namespace troupe
