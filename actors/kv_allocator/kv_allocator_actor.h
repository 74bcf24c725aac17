// kv_allocator_actor: wraps kv_allocator_core on a lane. Each kv_step_request from the scheduler is
// answered with one kv_step_grant (a control post: one request is out at a time). A handler that
// throws answers with an error grant, so the scheduler fails that step's requests and goes on.
// With a kv_copy_lane (a runner that swaps or copies blocks) the grant's copies run on this lane's device stream
// before the grant goes out (kv_copy_lane.h).
#pragma once

#include <memory>

#include "actors/kv_allocator/kv_allocator_core.h"
#include "actors/kv_allocator/kv_copy_lane.h"
#include "actors/kv_allocator/kv_allocator_msgs.h"
#include "actors/scheduler/scheduler_msgs.h"
#include "core/runtime/mailbox.h"

namespace troupe {

class kv_allocator_actor {
public:
    kv_allocator_actor(lane& home, kv_allocator_params params, int32_t capacity,
                       std::unique_ptr<kv_copy_lane> copies = nullptr);
    void connect(mailbox<scheduler_msg>& scheduler);

    mailbox<kv_allocator_msg>& inbox() { return inbox_; }

private:
    void handle(kv_allocator_msg& m);
    void on_failure(const kv_allocator_msg& m, const std::string& what);

    kv_allocator_core core_;
    std::unique_ptr<kv_copy_lane> copies_;
    mailbox<scheduler_msg>* scheduler_ = nullptr;
    mailbox<kv_allocator_msg> inbox_;
};

}  // namespace troupe
