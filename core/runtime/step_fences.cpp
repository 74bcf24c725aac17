#include "core/runtime/step_fences.h"

namespace troupe {

void step_fences::publish(int64_t step_id, std::shared_ptr<const device_event> done) {
    {
        std::lock_guard lock(mutex_);
        if (step_id <= last_) return;
        last_ = step_id;
        events_[step_id] = std::move(done);
        while (events_.size() > max_kept) events_.erase(events_.begin());
    }
    published_.notify_all();
}

result<std::shared_ptr<const device_event>> step_fences::await(int64_t step_id) {
    std::unique_lock lock(mutex_);
    published_.wait(lock, [&] { return last_ >= step_id || !closed_.empty(); });
    if (last_ < step_id) return make_error("waiting for step " + std::to_string(step_id) + ": " + closed_);
    // The compute stream runs in order: a later step's end also covers an older one that was dropped from events_.
    auto it = events_.lower_bound(step_id);
    return it->second;
}

void step_fences::close(std::string why) {
    {
        std::lock_guard lock(mutex_);
        closed_ = why.empty() ? "the step fences are closed" : std::move(why);
    }
    published_.notify_all();
}

int64_t step_fences::last_published() const {
    std::lock_guard lock(mutex_);
    return last_;
}

}  // namespace troupe
