// executor_actor: owns the model runner (weights, KV memory) on the compute lane; runs one step
// plan at a time and answers step_done. A step that throws is answered as a failed step.
//
// On a GPU its lane owns the compute stream: a plan that follows KV copies (step_plan::after_copies) makes the
// stream wait for them before the step's kernels, and every plan is published to the step fences once it ran (the
// runner publishes its event earlier, once the step's KV writes are enqueued), so the KV allocator's copies of the
// step's blocks can wait for it (actors/kv_allocator/kv_copy_lane.h).
#pragma once

#include <atomic>
#include <memory>

#include "actors/executor/executor_core.h"
#include "actors/executor/executor_msgs.h"
#include "actors/scheduler/scheduler_msgs.h"
#include "core/runtime/mailbox.h"
#include "core/runtime/step_fences.h"

namespace troupe {

class executor_actor {
public:
    executor_actor(lane& home, std::shared_ptr<model_runner> runner, std::shared_ptr<speculator> spec, int32_t capacity,
                   std::function<std::string(int32_t)> piece = {}, std::shared_ptr<step_fences> fences = nullptr);
    void connect(mailbox<scheduler_msg>& scheduler);

    mailbox<executor_msg>& inbox() { return inbox_; }

private:
    void handle(executor_msg& m);
    void on_failure(const executor_msg& m, const std::string& what);

    // Runs the plan after the copies it follows; a failure to order it is the step's error.
    step_done run(step_plan& p);

    lane& home_;
    std::shared_ptr<step_fences> fences_;
    executor_core core_;
    mailbox<scheduler_msg>* scheduler_ = nullptr;
    mailbox<executor_msg> inbox_;
};

}  // namespace troupe
