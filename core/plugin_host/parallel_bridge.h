// The per-call troupe_parallel an op receives: on the CPU, a troupe::parallel_for_fn (core/model/ops.h) as a C
// parallel_for (an empty function becomes a null parallel_for, which the plugin runs inline; an exception thrown
// by the pool is caught here and returned as TROUPE_ERR_INTERNAL, so nothing unwinds through plugin frames),
// backend CPU and no stream. On CUDA, no parallel_for, backend CUDA and the calling lane's cudaStream_t.
#pragma once

#include <troupe/plugin.h>

#include "core/model/ops.h"
#include "core/plugin_host/plugin_kind.h"

namespace troupe {

class parallel_bridge {
public:
    // CPU: ops run on the caller's worker pool.
    explicit parallel_bridge(const parallel_for_fn& parallel_for);
    // No worker pool: CUDA, where ops enqueue on `stream` (a cudaStream_t, null for the default stream), or a CPU
    // caller without workers (stream null).
    parallel_bridge(plugin_backend backend, void* stream);
    parallel_bridge(const parallel_bridge&) = delete;
    parallel_bridge& operator=(const parallel_bridge&) = delete;

    const troupe_parallel* c() const { return &c_; }

private:
    troupe_parallel c_{};  // host_ctx points at the caller's parallel_for_fn, which must outlive the bridge
};

}  // namespace troupe
