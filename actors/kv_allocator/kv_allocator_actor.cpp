#include "actors/kv_allocator/kv_allocator_actor.h"

namespace troupe {

kv_allocator_actor::kv_allocator_actor(lane& home, kv_allocator_params params, int32_t capacity)
    : core_(params),
      inbox_(
          home, "kv_allocator", capacity, [this](kv_allocator_msg& m) { handle(m); },
          [this](const kv_allocator_msg& m, const std::string& what) { on_failure(m, what); }) {}

void kv_allocator_actor::connect(mailbox<scheduler_msg>& scheduler) {
    scheduler_ = &scheduler;
}

void kv_allocator_actor::handle(kv_allocator_msg& m) {
    const kv_step_request& r = std::get<kv_step_request>(m);
    scheduler_->post(core_.grant(r));
}

void kv_allocator_actor::on_failure(const kv_allocator_msg& m, const std::string& what) {
    kv_step_grant g;
    g.step_id = std::get<kv_step_request>(m).step_id;
    g.error = what;
    g.pool = core_.view();
    scheduler_->post(std::move(g));
}

}  // namespace troupe
