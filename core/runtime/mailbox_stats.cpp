#include "core/runtime/mailbox_stats.h"

#include "core/result.h"

namespace troupe {

mailbox_counters::mailbox_counters(std::string name, int32_t capacity) : name_(std::move(name)), capacity_(capacity) {
    TROUPE_ASSERT(capacity > 0, "mailbox " + name_ + ": capacity must be positive");
}

bool mailbox_counters::try_acquire() {
    if (closed_.load(std::memory_order_relaxed)) {
        n_rejected_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    int32_t n = pending_.load(std::memory_order_relaxed);
    do {
        if (n >= capacity_) {
            n_rejected_.fetch_add(1, std::memory_order_relaxed);
            return false;
        }
    } while (!pending_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
    int32_t hw = high_water_.load(std::memory_order_relaxed);
    while (n + 1 > hw && !high_water_.compare_exchange_weak(hw, n + 1, std::memory_order_relaxed)) {
    }
    return true;
}

mailbox_stats mailbox_counters::stats() const {
    mailbox_stats s;
    s.name = name_;
    s.capacity = capacity_;
    s.pending = pending_.load();
    s.high_water = high_water_.load();
    s.n_handled = n_handled_.load();
    s.n_rejected = n_rejected_.load();
    s.n_handler_failures = n_handler_failures_.load();
    return s;
}

}  // namespace troupe
