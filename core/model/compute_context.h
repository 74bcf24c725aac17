// compute_context: the executor's CPU workers, as the kernels (thread_pool) and plugins (parallel_for) see them.
#pragma once

#include "core/model/ops.h"
#include "kernels/cpu/thread_pool.h"

namespace troupe {

struct compute_context {
    cpu::thread_pool* pool = nullptr;
    parallel_for_fn parallel_for;  // runs on *pool

    static compute_context over(cpu::thread_pool& pool);
};

}  // namespace troupe
