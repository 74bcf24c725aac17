// executor_actor: owns the model runner (weights, KV memory) on the compute lane; runs one step
// plan at a time and answers step_done. A step that throws is answered as a failed step.
#pragma once

#include <atomic>
#include <memory>

#include "actors/executor/executor_core.h"
#include "actors/executor/executor_msgs.h"
#include "actors/scheduler/scheduler_msgs.h"
#include "core/runtime/mailbox.h"

namespace troupe {

class executor_actor {
public:
    executor_actor(lane& home, std::shared_ptr<model_runner> runner, std::shared_ptr<speculator> spec, int32_t capacity,
                   std::function<std::string(int32_t)> piece = {});
    void connect(mailbox<scheduler_msg>& scheduler);

    mailbox<executor_msg>& inbox() { return inbox_; }

private:
    void handle(executor_msg& m);
    void on_failure(const executor_msg& m, const std::string& what);

    executor_core core_;
    mailbox<scheduler_msg>* scheduler_ = nullptr;
    mailbox<executor_msg> inbox_;
};

}  // namespace troupe
