// The per-call troupe_parallel an op receives: on the CPU, a troupe::parallel_for_fn (core/model/ops.h) as a C
// parallel_for and, when the caller's thread pool is known, its parallel_ranges (one contiguous share per thread:
// what decode's memory-streaming loops want), parallel_shares (the shares given: a placed weight's shards) and its
// thread count, backend CPU and no stream. An empty function becomes a null
// parallel_for, which the plugin runs inline; an exception thrown by the pool is caught here and returned as
// TROUPE_ERR_INTERNAL, so nothing unwinds through plugin frames. On CUDA, no parallel_for, backend CUDA and the
// calling lane's cudaStream_t.
#pragma once

#include <troupe/plugin.h>

#include "core/model/ops.h"
#include "core/plugin_host/plugin_kind.h"
#include "kernels/cpu/thread_pool.h"

namespace troupe {

class parallel_bridge {
public:
    // CPU: ops run on the caller's worker pool; `pool` (may be null) also gives them parallel_ranges.
    explicit parallel_bridge(const parallel_for_fn& parallel_for, cpu::thread_pool* pool = nullptr);
    // No worker pool: CUDA, where ops enqueue on `stream` (a cudaStream_t, null for the default stream), or a CPU
    // caller without workers (stream null).
    parallel_bridge(plugin_backend backend, void* stream);
    parallel_bridge(const parallel_bridge&) = delete;
    parallel_bridge& operator=(const parallel_bridge&) = delete;

    const troupe_parallel* c() const { return &c_; }

    // What host_ctx points at: the caller's parallel_for (which must outlive the bridge) and pool.
    struct targets {
        const parallel_for_fn* parallel_for = nullptr;
        cpu::thread_pool* pool = nullptr;
    };

private:
    targets targets_;
    troupe_parallel c_{};  // host_ctx points at targets_
};

}  // namespace troupe
