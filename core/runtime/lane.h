// lane: an execution lane that actors are pinned to. One io_context, run by exactly one thread, so
// every handler posted to a lane runs one at a time in post order (FIFO); actors that share a lane
// are serialized with each other. That single-thread lane plus post() is the whole actor layer.
//
// Two ways to drive a lane:
//   threaded: start() spawns the thread that runs it; stop() lets queued handlers finish and joins.
//   manual:   never started; the owner calls poll() / run_until_idle() on its own thread (tests run
//             every actor on one manual lane, which makes the message order fully deterministic).
//
// On a GPU a lane also owns a device stream (device_stream.h; the backend makes it, the engine attaches it): the
// executor's lane the compute stream, the KV allocator's lane the copy stream. Handlers on the lane enqueue their
// device work on stream(); a CPU lane has none. Asio stays inside lane.cpp so that actor code compiles without it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/runtime/device_stream.h"

namespace troupe {

class lane {
public:
    explicit lane(std::string name);
    ~lane();
    lane(const lane&) = delete;
    lane& operator=(const lane&) = delete;

    const std::string& name() const { return name_; }

    // Threaded mode: runs the lane on a new thread until stop().
    void start();
    // Runs what is already queued, then joins the thread. Idempotent; a no-op for a manual lane.
    void stop();
    bool threaded() const;

    // Queues fn to run on the lane. Thread-safe. Handlers run in post order.
    void post(std::function<void()> fn);

    // Manual mode: runs ready handlers on the caller's thread; returns how many ran.
    size_t poll();
    // Manual mode: runs at most one handler; returns how many ran (0 or 1).
    size_t poll_one();
    // Manual mode: polls until nothing is queued (handlers may post more; those run too).
    size_t run_until_idle();

    // True on the lane's own thread (or inside poll() for a manual lane).
    bool in_lane() const;

    // The device stream this lane owns, or null (a CPU lane). Attached once, before the lane runs handlers that
    // use it; false (nothing changes) when the lane already owns another stream (one lane for every actor: its
    // actors then share the stream it has).
    bool attach_stream(std::shared_ptr<device_stream> stream);
    device_stream* stream() const { return stream_.get(); }

    // Tests: a function told "<mailbox> <- <message>" for every message handled on this lane.
    // Set it before any message is posted; it runs on the lane.
    void set_trace(std::function<void(const std::string&)> trace) { trace_ = std::move(trace); }
    bool tracing() const { return static_cast<bool>(trace_); }
    void trace(const std::string& event) const { trace_(event); }

private:
    struct impl;
    std::string name_;
    std::function<void(const std::string&)> trace_;
    std::shared_ptr<device_stream> stream_;
    std::unique_ptr<impl> impl_;
};

}  // namespace troupe
