// step_fences: where the compute lane says that a step's device work is enqueued, and a copy lane waits to hear
// it. The KV allocator's lane copies blocks (swaps, copy-on-write) while the executor's lane runs steps; a copy of
// blocks that step N wrote must be enqueued after step N's work, behind step N's event (device_stream.h). With
// planning ahead, the allocator grants step N+1 (and its copies) while the executor may not have enqueued step N
// yet: await(N) blocks the allocator's lane until it has (only for as long as it takes to enqueue, not to run).
//
// Invariants: published step ids only grow (the executor runs plans in order); every plan sent to the executor is
// published exactly once, also when it fails (with no event: nothing of it is left on the device), so a waiter
// for a step that was sent always wakes. close() wakes every waiter with an error (engine stop).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/result.h"
#include "core/runtime/device_stream.h"

namespace troupe {

class step_fences {
public:
    // Step step_id's work is enqueued; `done` marks its end (null: nothing of it is pending on a device, as on the
    // CPU, where the step is over when it is published). A step id at or below the last published is ignored.
    void publish(int64_t step_id, std::shared_ptr<const device_event> done);
    // Blocks until step step_id (or a later one) is published; then the event of the first published step at or
    // after step_id (null: nothing to wait for on the device). An error after close().
    result<std::shared_ptr<const device_event>> await(int64_t step_id);
    // Fails every await, now and later, with `why`.
    void close(std::string why);
    int64_t last_published() const;

private:
    static constexpr size_t max_kept = 64;  // recent events; an older step is covered by a later one's event
    mutable std::mutex mutex_;
    std::condition_variable published_;
    int64_t last_ = -1;
    std::map<int64_t, std::shared_ptr<const device_event>> events_;  // by step id
    std::string closed_;
};

}  // namespace troupe
