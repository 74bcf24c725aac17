#include "core/plugin_host/parallel_bridge.h"

#include <span>

namespace troupe {
namespace {

int32_t call_parallel_for(void* host_ctx, int64_t n, troupe_range_fn fn, void* fn_ctx) {
    try {
        const auto& parallel_for = *static_cast<const parallel_bridge::targets*>(host_ctx)->parallel_for;
        parallel_for(n, [fn, fn_ctx](int64_t begin, int64_t end) { fn(fn_ctx, begin, end); });
        return TROUPE_OK;
    } catch (...) {
        return TROUPE_ERR_INTERNAL;
    }
}

int32_t call_parallel_ranges(void* host_ctx, int64_t n, int64_t grain, troupe_range_fn fn, void* fn_ctx) {
    if (grain < 1) return TROUPE_ERR_INVALID_ARGUMENT;
    try {
        cpu::thread_pool& pool = *static_cast<const parallel_bridge::targets*>(host_ctx)->pool;
        pool.parallel_ranges(n, grain, [fn, fn_ctx](int64_t begin, int64_t end) { fn(fn_ctx, begin, end); });
        return TROUPE_OK;
    } catch (...) {
        return TROUPE_ERR_INTERNAL;
    }
}

int32_t call_parallel_shares(void* host_ctx, const int64_t* bounds, int32_t n_shares, int64_t grain, troupe_range_fn fn,
                             void* fn_ctx) {
    cpu::thread_pool& pool = *static_cast<const parallel_bridge::targets*>(host_ctx)->pool;
    if (bounds == nullptr || n_shares < 1 || n_shares > pool.n_threads() || bounds[0] != 0 || grain < 1) {
        return TROUPE_ERR_INVALID_ARGUMENT;
    }
    for (int32_t s = 0; s < n_shares; ++s) {
        if (bounds[s + 1] < bounds[s]) return TROUPE_ERR_INVALID_ARGUMENT;
    }
    try {
        pool.parallel_ranges(std::span<const int64_t>(bounds, static_cast<size_t>(n_shares) + 1), grain,
                             [fn, fn_ctx](int64_t begin, int64_t end) { fn(fn_ctx, begin, end); });
        return TROUPE_OK;
    } catch (...) {
        return TROUPE_ERR_INTERNAL;
    }
}

}  // namespace

parallel_bridge::parallel_bridge(const parallel_for_fn& parallel_for, cpu::thread_pool* pool)
    : targets_{&parallel_for, pool}, c_{} {
    c_.struct_size = sizeof(troupe_parallel);
    c_.version = TROUPE_PARALLEL_VERSION;
    c_.host_ctx = &targets_;
    c_.parallel_for = parallel_for ? call_parallel_for : nullptr;
    c_.backend = TROUPE_BACKEND_CPU;
    c_.stream = nullptr;
    c_.parallel_ranges = pool != nullptr ? call_parallel_ranges : nullptr;
    c_.parallel_shares = pool != nullptr ? call_parallel_shares : nullptr;
    c_.n_threads = pool != nullptr ? pool->n_threads() : 0;
}

parallel_bridge::parallel_bridge(plugin_backend backend, void* stream) : c_{} {
    c_.struct_size = sizeof(troupe_parallel);
    c_.version = TROUPE_PARALLEL_VERSION;
    c_.host_ctx = nullptr;
    c_.parallel_for = nullptr;
    c_.backend = to_c_backend(backend);
    c_.stream = stream;
    c_.parallel_ranges = nullptr;
    c_.parallel_shares = nullptr;
    c_.n_threads = 0;
}

}  // namespace troupe
