// scheduler_actor: wraps scheduler_core; turns its outputs into messages to the KV allocator, the
// executor and the streamer. Token deliveries are bounded posts: when the streamer's mailbox is full
// (its clients are not keeping up), the requests in that delivery fail as overloaded.
#pragma once

#include <atomic>
#include <deque>
#include <mutex>

#include "actors/executor/executor_msgs.h"
#include "actors/kv_allocator/kv_allocator_msgs.h"
#include "actors/scheduler/scheduler_core.h"
#include "actors/scheduler/scheduler_msgs.h"
#include "actors/streamer/streamer_msgs.h"
#include "core/runtime/mailbox.h"

namespace troupe {

// Readable from any thread (copied from the core after every message).
struct scheduler_live_counters {
    std::atomic<int64_t> n_steps{0};
    std::atomic<int64_t> n_tokens{0};
    std::atomic<int64_t> n_drafted{0};
    std::atomic<int64_t> n_accepted{0};
    std::atomic<int64_t> n_waiting{0};
    std::atomic<int64_t> n_running{0};
    std::atomic<int64_t> n_preemptions{0};
    std::atomic<int64_t> n_prompt_tokens{0};
};

class scheduler_actor {
public:
    scheduler_actor(lane& home, scheduler_params config, int32_t capacity);
    void connect(mailbox<kv_allocator_msg>& kv_allocator, mailbox<executor_msg>& executor,
                 mailbox<streamer_msg>& streamer);

    mailbox<scheduler_msg>& inbox() { return inbox_; }
    const scheduler_live_counters& counters() const { return live_; }
    // The requests and KV pool as of the last handled message (any thread; engine::snapshot()).
    void view(std::vector<request_view>& requests, kv_view& kv, step_view& steps, spec_view& spec) const;

private:
    void handle(scheduler_msg& m);
    void on_failure(const scheduler_msg& m, const std::string& what);
    void send(scheduler_output& out);

    void publish();

    scheduler_core core_;
    scheduler_output out_;
    bool tick_pending_ = false;
    scheduler_live_counters live_;
    // What view() returns, refreshed after each message (at most every few ms for the request list).
    mutable std::mutex view_mutex_;
    std::vector<request_view> requests_;
    kv_view kv_view_;
    step_view step_view_;
    spec_view spec_view_;  // without the plugin's name (the engine knows it)
    time_point last_publish_{};
    struct step_sample {
        time_point when;
        int32_t n_seqs;
        int32_t n_tokens;
    };
    std::deque<step_sample> recent_steps_;  // over the last minute
    int64_t published_steps_ = 0;
    mailbox<kv_allocator_msg>* kv_allocator_ = nullptr;
    mailbox<executor_msg>* executor_ = nullptr;
    int64_t last_sent_step_ = -1;  // the last step plan posted to the executor (kv_step_request::last_sent_step)
    mailbox<streamer_msg>* streamer_ = nullptr;
    mailbox<scheduler_msg> inbox_;
};

}  // namespace troupe
