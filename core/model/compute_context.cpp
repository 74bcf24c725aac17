#include "core/model/compute_context.h"

namespace troupe {

compute_context compute_context::over(cpu::thread_pool& pool) {
    return compute_context{&pool, pool.as_parallel_for()};
}

status quant_op::matmul_on(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                           const compute_context& ctx) {
    return matmul(w, x, y, n_tokens, ctx.parallel_for);
}

}  // namespace troupe
