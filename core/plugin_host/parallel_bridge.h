// Hands a troupe::parallel_for_fn (core/model/ops.h) to a plugin as a C troupe_parallel. An empty
// function becomes a null parallel_for, which the plugin runs inline. An exception thrown by the pool
// is caught here and returned as TROUPE_ERR_INTERNAL, so nothing unwinds through plugin frames.
#pragma once

#include <troupe/plugin.h>

#include "core/model/ops.h"

namespace troupe {

class parallel_bridge {
public:
    explicit parallel_bridge(const parallel_for_fn& parallel_for);
    parallel_bridge(const parallel_bridge&) = delete;
    parallel_bridge& operator=(const parallel_bridge&) = delete;

    const troupe_parallel* c() const { return &c_; }

private:
    troupe_parallel c_;  // host_ctx points at the caller's parallel_for_fn, which must outlive the bridge
};

}  // namespace troupe
