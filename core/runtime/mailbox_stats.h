// mailbox_counters: the non-template half of a mailbox: the bound, the counts, the failure tally.
//
// A mailbox counts the messages it holds that came through try_post() (work that arrives from
// outside the pipeline: submissions, token deliveries) and refuses the one that would exceed its
// capacity. Control messages (post(): cancel, finish, step plans and results) are not refused: the
// protocol bounds them (at most one step in flight, a constant number per live request).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace troupe {

struct mailbox_stats {
    std::string name;
    int32_t capacity = 0;
    int32_t pending = 0;     // bounded messages queued now
    int32_t high_water = 0;  // most bounded messages ever queued at once
    int64_t n_handled = 0;
    int64_t n_rejected = 0;          // try_post() refused: full or closed
    int64_t n_handler_failures = 0;  // handlers that threw
};

class mailbox_counters {
public:
    mailbox_counters(std::string name, int32_t capacity);

    const std::string& name() const { return name_; }
    int32_t capacity() const { return capacity_; }
    int32_t pending() const { return pending_.load(std::memory_order_relaxed); }

    // Reserves a slot for a bounded message; false (and counted) when full or closed.
    bool try_acquire();
    void release() { pending_.fetch_sub(1, std::memory_order_relaxed); }
    void handled() { n_handled_.fetch_add(1, std::memory_order_relaxed); }
    void handler_failed() { n_handler_failures_.fetch_add(1, std::memory_order_relaxed); }
    // After close() every try_acquire() fails.
    void close() { closed_.store(true); }
    bool closed() const { return closed_.load(); }

    mailbox_stats stats() const;

private:
    std::string name_;
    int32_t capacity_;
    std::atomic<int32_t> pending_{0};
    std::atomic<int32_t> high_water_{0};
    std::atomic<int64_t> n_handled_{0};
    std::atomic<int64_t> n_rejected_{0};
    std::atomic<int64_t> n_handler_failures_{0};
    std::atomic<bool> closed_{false};
};

}  // namespace troupe
