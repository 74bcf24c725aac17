// kv_allocator_actor: owns the block pool; answers the scheduler's reservations. The KV memory itself
// belongs to the executor's model runner; this actor only decides which blocks a sequence may use.
#pragma once

#include "actors/kv_allocator/block_pool.h"
#include "actors/kv_allocator/kv_allocator_msgs.h"
#include "actors/scheduler/scheduler_msgs.h"
#include "core/runtime/mailbox.h"

namespace troupe {

class kv_allocator_actor {
public:
    kv_allocator_actor(lane& home, kv_geometry geometry, int32_t capacity);
    void connect(mailbox<scheduler_msg>& scheduler);

    mailbox<kv_allocator_msg>& inbox() { return inbox_; }

private:
    void handle(kv_allocator_msg& m);
    void on_failure(const kv_allocator_msg& m, const std::string& what);

    block_pool pool_;
    mailbox<scheduler_msg>* scheduler_ = nullptr;
    mailbox<kv_allocator_msg> inbox_;
};

}  // namespace troupe
