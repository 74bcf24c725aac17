// A fixed set of persistent worker threads for data-parallel loops (matmuls, attention heads).
//
// parallel_for(n, fn) splits [0, n) into one contiguous range per thread (the caller is thread 0 and
// works too) and returns when all ranges are done. Workers spin briefly on a generation counter after
// each job, so back-to-back loops of a decode step hand over in well under a microsecond, then sleep
// on a futex (std::atomic::wait) so an idle pool costs nothing.
//
// One parallel_for at a time: calls from several threads are serialized by a mutex; a call from inside
// a running fn (nesting) runs inline on the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace troupe {

// Runs fn(begin, end) over [0, n) split across worker threads; returns when all are done.
// (Same alias as core/model/ops.h, redeclared so kernels do not depend on core/model.)
using parallel_for_fn = std::function<void(int64_t n, const std::function<void(int64_t, int64_t)>& fn)>;

namespace cpu {

class thread_pool {
public:
    // n_threads counts the caller; 0 means std::thread::hardware_concurrency().
    // spin_us: how long an idle worker spins before sleeping.
    explicit thread_pool(int n_threads = 0, int spin_us = 200);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int n_threads() const { return n_threads_; }

    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

    // An adapter for code that takes a parallel_for_fn (plugins, the model graph).
    parallel_for_fn as_parallel_for();

private:
    void worker_main(int index);
    void run_range(int index);

    int n_threads_;
    int spin_us_;
    std::vector<std::thread> workers_;
    std::mutex submit_mutex_;

    // The current job, published by a release increment of generation_.
    const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
    int64_t n_ = 0;
    alignas(64) std::atomic<uint32_t> generation_{0};
    alignas(64) std::atomic<int> n_done_{0};
    alignas(64) std::atomic<bool> stop_{false};
};

}  // namespace cpu
}  // namespace troupe
