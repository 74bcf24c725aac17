#include "actors/kv_allocator/kv_allocator_actor.h"

namespace troupe {

kv_allocator_actor::kv_allocator_actor(lane& home, kv_allocator_params params, int32_t capacity,
                                       std::unique_ptr<kv_copy_lane> copies)
    : core_(params),
      copies_(std::move(copies)),
      inbox_(
          home, "kv_allocator", capacity, [this](kv_allocator_msg& m) { handle(m); },
          [this](const kv_allocator_msg& m, const std::string& what) { on_failure(m, what); }) {}

void kv_allocator_actor::connect(mailbox<scheduler_msg>& scheduler) {
    scheduler_ = &scheduler;
}

void kv_allocator_actor::handle(kv_allocator_msg& m) {
    const kv_step_request& r = std::get<kv_step_request>(m);
    kv_step_grant g = core_.grant(r);
    if (copies_) copies_->run(g, r.last_sent_step);
    scheduler_->post(std::move(g));
}

void kv_allocator_actor::on_failure(const kv_allocator_msg& m, const std::string& what) {
    kv_step_grant g;
    g.step_id = std::get<kv_step_request>(m).step_id;
    g.error = what;
    g.pool = core_.view();
    scheduler_->post(std::move(g));
}

}  // namespace troupe
