#include "actors/executor/executor_actor.h"

#include "actors/common/overloaded.h"

namespace troupe {

executor_actor::executor_actor(lane& home, std::shared_ptr<model_runner> runner, std::shared_ptr<speculator> spec,
                               int32_t capacity, std::function<std::string(int32_t)> piece,
                               std::shared_ptr<step_fences> fences)
    : home_(home),
      fences_(std::move(fences)),
      core_(std::move(runner), std::move(spec), std::move(piece)),
      inbox_(
          home, "executor", capacity, [this](executor_msg& m) { handle(m); },
          [this](const executor_msg& m, const std::string& what) { on_failure(m, what); }) {}

void executor_actor::connect(mailbox<scheduler_msg>& scheduler) {
    scheduler_ = &scheduler;
}

void executor_actor::handle(executor_msg& m) {
    std::visit(overloaded{
                   [&](step_plan& p) { scheduler_->post(run(p)); },
                   [&](retire_sequences& r) { core_.retire(r.seq_ids); },
               },
               m);
}

step_done executor_actor::run(step_plan& p) {
    step_done d;
    if (p.after_copies) {
        device_stream* stream = home_.stream();
        const status s =
            stream != nullptr
                ? stream->wait(*p.after_copies)
                : status(make_error("the executor's lane " + home_.name() + " owns no device stream to wait on"));
        if (!s.ok()) {
            d.step_id = p.step_id;
            d.error = "executor: step " + std::to_string(p.step_id) + " cannot wait for its KV copies: " + s.message();
        }
    }
    if (d.error.empty()) d = core_.run(p);
    // Whatever happened, the step is over on this lane's side: a copy waiting for it may go (the runner published
    // the step's device event already where it has one; this publishes nothing then).
    if (fences_) fences_->publish(p.step_id, nullptr);
    return d;
}

void executor_actor::on_failure(const executor_msg& m, const std::string& what) {
    if (const auto* p = std::get_if<step_plan>(&m)) {
        if (fences_) fences_->publish(p->step_id, nullptr);
        step_done d;
        d.step_id = p->step_id;
        d.error = "executor: " + what;
        scheduler_->post(std::move(d));
    }
}

}  // namespace troupe
