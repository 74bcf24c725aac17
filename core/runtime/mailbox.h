// mailbox<Msg>: an actor's bounded inbox on a lane. Msg is the actor's std::variant of plain message
// aggregates, each with a `static constexpr const char* name`. The handler runs on the lane, one
// message at a time, in post order.
//
// Supervision: a handler that throws does not unwind into the lane. The exception is logged with the
// mailbox's name, counted, and handed with the message to the actor's failure function, which fails
// the requests that message touched; the actor then takes its next message.
//
// Lifetime: queued handlers refer to the mailbox, so it must outlive its lane's last run (the engine
// stops lanes before it destroys actors).
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <variant>

#include "core/log/log.h"
#include "core/runtime/lane.h"
#include "core/runtime/mailbox_stats.h"

namespace troupe {

template <class Msg>
class mailbox {
public:
    using handler_fn = std::function<void(Msg&)>;
    using failure_fn = std::function<void(const Msg&, const std::string& what)>;

    mailbox(lane& l, std::string name, int32_t capacity, handler_fn handler, failure_fn on_failure)
        : lane_(l),
          counters_(std::move(name), capacity),
          handler_(std::move(handler)),
          on_failure_(std::move(on_failure)) {}
    mailbox(const mailbox&) = delete;
    mailbox& operator=(const mailbox&) = delete;

    // Bounded post: false when the mailbox already holds `capacity` bounded messages, or is closed.
    bool try_post(Msg m) {
        if (!counters_.try_acquire()) return false;
        lane_.post([this, m = std::move(m)]() mutable {
            counters_.release();
            deliver(m);
        });
        return true;
    }

    // Control post: never refused (the protocol bounds these; see mailbox_stats.h).
    void post(Msg m) {
        lane_.post([this, m = std::move(m)]() mutable { deliver(m); });
    }

    void close() { counters_.close(); }
    lane& home() const { return lane_; }
    mailbox_stats stats() const { return counters_.stats(); }

private:
    void deliver(Msg& m) {
        counters_.handled();
        if (lane_.tracing()) {
            lane_.trace(counters_.name() + " <- " + std::visit([](const auto& x) { return std::string(x.name); }, m));
        }
        try {
            handler_(m);
        } catch (const std::exception& e) {
            fail(m, e.what());
        } catch (...) {
            fail(m, "unknown exception");
        }
    }

    void fail(const Msg& m, const std::string& what) {
        counters_.handler_failed();
        TROUPE_LOG_ERROR(counters_.name().c_str(), "handler for message %zu threw: %s", m.index(), what.c_str());
        try {
            on_failure_(m, what);
        } catch (const std::exception& e) {
            TROUPE_LOG_ERROR(counters_.name().c_str(), "failure handler threw too: %s", e.what());
        }
    }

    lane& lane_;
    mailbox_counters counters_;
    handler_fn handler_;
    failure_fn on_failure_;
};

}  // namespace troupe
