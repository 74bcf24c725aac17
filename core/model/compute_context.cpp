#include "core/model/compute_context.h"

namespace troupe {

compute_context compute_context::over(cpu::thread_pool& pool) {
    return compute_context{&pool, pool.as_parallel_for()};
}

}  // namespace troupe
