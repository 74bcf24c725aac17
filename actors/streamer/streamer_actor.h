// streamer_actor: owns the client sinks from open_stream on; detokenizes, applies stop strings,
// delivers text, records the per-token sampled -> delivered overhead, and tells the scheduler when a
// stop string ended a request.
#pragma once

#include "actors/scheduler/scheduler_msgs.h"
#include "actors/streamer/streamer_core.h"
#include "actors/streamer/streamer_msgs.h"
#include "core/runtime/mailbox.h"

namespace troupe {

class streamer_actor {
public:
    streamer_actor(lane& home, std::shared_ptr<const text_codec> codec, latency_histogram* overhead,
                   streamer_core::end_fn on_end, int32_t capacity);
    void connect(mailbox<scheduler_msg>& scheduler);

    mailbox<streamer_msg>& inbox() { return inbox_; }
    // Before start: where finished requests' timings go.
    void set_timing_fn(streamer_core::timing_fn fn) { core_.set_timing_fn(std::move(fn)); }

private:
    void handle(streamer_msg& m);
    void on_failure(const streamer_msg& m, const std::string& what);

    streamer_core core_;
    std::vector<request_id> stopped_;
    mailbox<scheduler_msg>* scheduler_ = nullptr;
    mailbox<streamer_msg> inbox_;
};

}  // namespace troupe
