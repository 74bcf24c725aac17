// device_stream: the device queue a lane owns on a GPU backend (DESIGN.md: "each actor is pinned to an execution
// lane: a CUDA stream on a GPU, a CPU thread otherwise"). The executor's lane owns the compute stream, the KV
// allocator's lane a copy stream; a CPU lane owns none (lane::stream() is null).
//
// Work enqueued on one stream runs in enqueue order. Two streams are ordered only through events: record() marks
// the point after everything enqueued so far, and wait(e) makes the work enqueued afterwards wait for that point,
// without blocking the host. So a copy that must follow a step waits on the step's event, and the step after the
// copy waits on the copy's event (actors/kv_allocator/kv_copy_lane.h says which waits for which).
//
// The backend makes both (core/backend/cuda_lane_stream.h for CUDA); the handles are opaque here, so core and the
// actors compile without CUDA headers, and tests drive the ordering logic with a fake stream.
#pragma once

#include <memory>
#include <string>

#include "core/result.h"

namespace troupe {

// A point in one stream. Valid as long as a shared_ptr to it lives (its stream may be gone by then).
class device_event {
public:
    virtual ~device_event() = default;
};

class device_stream {
public:
    virtual ~device_stream() = default;
    virtual std::string name() const = 0;  // "cuda:0 lane 1 (KV copies)"
    virtual void* native() const = 0;      // the cudaStream_t, for plugin ops (troupe_parallel::stream)
    // An event after everything enqueued on this stream so far.
    virtual result<std::shared_ptr<const device_event>> record() = 0;
    // Work enqueued on this stream from now on runs after `e` (an event of any stream of the same backend).
    virtual status wait(const device_event& e) = 0;
    // Blocks the calling thread until everything enqueued so far is done.
    virtual status synchronize() = 0;
};

}  // namespace troupe
