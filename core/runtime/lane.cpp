#include "core/runtime/lane.h"

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <optional>
#include <thread>

#include "core/log/log.h"
#include "core/result.h"

namespace troupe {
namespace {
thread_local const lane* t_current_lane = nullptr;

struct current_lane_scope {
    explicit current_lane_scope(const lane* l) : previous_(t_current_lane) { t_current_lane = l; }
    ~current_lane_scope() { t_current_lane = previous_; }
    const lane* previous_;
};
}  // namespace

struct lane::impl {
    boost::asio::io_context io{1};  // concurrency hint 1: one thread runs it, so Asio can skip locking where it may
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard;
    std::thread thread;
    std::atomic<bool> started{false};
};

lane::lane(std::string name) : name_(std::move(name)), impl_(std::make_unique<impl>()) {}

lane::~lane() {
    stop();
}

void lane::start() {
    TROUPE_ASSERT(!impl_->started.load(), "lane " + name_ + " started twice");
    impl_->started.store(true);
    impl_->guard.emplace(impl_->io.get_executor());
    impl_->thread = std::thread([this] {
        current_lane_scope scope(this);
        impl_->io.run();
    });
}

void lane::stop() {
    if (!impl_->started.load()) return;
    impl_->guard.reset();  // run() returns once the queue is empty
    if (impl_->thread.joinable()) {
        TROUPE_ASSERT(!in_lane(), "lane " + name_ + " stopped from its own thread");
        impl_->thread.join();
    }
}

bool lane::threaded() const {
    return impl_->started.load();
}

void lane::post(std::function<void()> fn) {
    boost::asio::post(impl_->io, std::move(fn));
}

size_t lane::poll() {
    TROUPE_ASSERT(!impl_->started.load(), "lane " + name_ + ": poll() on a threaded lane");
    current_lane_scope scope(this);
    size_t n = impl_->io.poll();
    impl_->io.restart();
    return n;
}

size_t lane::poll_one() {
    TROUPE_ASSERT(!impl_->started.load(), "lane " + name_ + ": poll_one() on a threaded lane");
    current_lane_scope scope(this);
    size_t n = impl_->io.poll_one();
    impl_->io.restart();
    return n;
}

size_t lane::run_until_idle() {
    size_t total = 0;
    for (size_t n = poll(); n > 0; n = poll()) total += n;
    return total;
}

bool lane::attach_stream(std::shared_ptr<device_stream> stream) {
    if (stream_ && stream_ != stream) return false;
    stream_ = std::move(stream);
    return true;
}

bool lane::in_lane() const {
    return t_current_lane == this;
}

}  // namespace troupe
