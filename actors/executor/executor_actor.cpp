#include "actors/executor/executor_actor.h"

#include "actors/common/overloaded.h"

namespace troupe {

executor_actor::executor_actor(lane& home, std::shared_ptr<model_runner> runner, std::shared_ptr<speculator> spec,
                               int32_t capacity, std::function<std::string(int32_t)> piece)
    : core_(std::move(runner), std::move(spec), std::move(piece)),
      inbox_(
          home, "executor", capacity, [this](executor_msg& m) { handle(m); },
          [this](const executor_msg& m, const std::string& what) { on_failure(m, what); }) {}

void executor_actor::connect(mailbox<scheduler_msg>& scheduler) {
    scheduler_ = &scheduler;
}

void executor_actor::handle(executor_msg& m) {
    std::visit(overloaded{
                   [&](step_plan& p) { scheduler_->post(core_.run(p)); },
                   [&](retire_sequences& r) { core_.retire(r.seq_ids); },
                   [&](swap_blocks& w) { core_.swap(w); },
               },
               m);
}

void executor_actor::on_failure(const executor_msg& m, const std::string& what) {
    if (const auto* p = std::get_if<step_plan>(&m)) {
        step_done d;
        d.step_id = p->step_id;
        d.error = "executor: " + what;
        scheduler_->post(std::move(d));
    }
}

}  // namespace troupe
