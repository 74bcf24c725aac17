#include "actors/kv_allocator/kv_allocator_actor.h"

#include "actors/common/overloaded.h"

namespace troupe {

kv_allocator_actor::kv_allocator_actor(lane& home, kv_geometry geometry, int32_t capacity)
    : pool_(geometry),
      inbox_(
          home, "kv_allocator", capacity, [this](kv_allocator_msg& m) { handle(m); },
          [this](const kv_allocator_msg& m, const std::string& what) { on_failure(m, what); }) {}

void kv_allocator_actor::connect(mailbox<scheduler_msg>& scheduler) {
    scheduler_ = &scheduler;
}

void kv_allocator_actor::handle(kv_allocator_msg& m) {
    std::visit(overloaded{
                   [&](reserve_blocks& r) {
                       if (auto table = pool_.reserve(r.seq_id, r.n_tokens)) {
                           const int32_t covered = static_cast<int32_t>(table->size()) * pool_.block_size();
                           scheduler_->post(blocks_granted{r.seq_id, std::move(*table), covered});
                       } else {
                           const bool never = pool_.blocks_for(r.n_tokens) > pool_.n_blocks();
                           scheduler_->post(blocks_refused{r.seq_id, r.n_tokens, never});
                       }
                   },
                   [&](release_blocks& r) { pool_.release(r.seq_id); },
               },
               m);
}

void kv_allocator_actor::on_failure(const kv_allocator_msg& m, const std::string& what) {
    // A reservation that failed is answered as one that can never succeed, so the request fails
    // instead of waiting forever.
    if (const auto* r = std::get_if<reserve_blocks>(&m)) scheduler_->post(blocks_refused{r->seq_id, r->n_tokens, true});
}

}  // namespace troupe
