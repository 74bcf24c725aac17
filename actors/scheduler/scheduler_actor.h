// scheduler_actor: wraps scheduler_core; turns its outputs into messages to the KV allocator, the
// executor and the streamer. Token deliveries are bounded posts: when the streamer's mailbox is full
// (its clients are not keeping up), the requests in that delivery fail as overloaded.
#pragma once

#include <atomic>

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
};

class scheduler_actor {
public:
    scheduler_actor(lane& home, scheduler_config config, int32_t capacity);
    void connect(mailbox<kv_allocator_msg>& kv, mailbox<executor_msg>& executor, mailbox<streamer_msg>& streamer);

    mailbox<scheduler_msg>& inbox() { return inbox_; }
    const scheduler_live_counters& counters() const { return live_; }

private:
    void handle(scheduler_msg& m);
    void on_failure(const scheduler_msg& m, const std::string& what);
    void send(scheduler_output& out);

    scheduler_core core_;
    scheduler_output out_;
    scheduler_live_counters live_;
    mailbox<kv_allocator_msg>* kv_ = nullptr;
    mailbox<executor_msg>* executor_ = nullptr;
    mailbox<streamer_msg>* streamer_ = nullptr;
    mailbox<scheduler_msg> inbox_;
};

}  // namespace troupe
