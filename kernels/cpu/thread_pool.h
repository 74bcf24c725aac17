// A fixed set of persistent worker threads for data-parallel loops (matmuls, attention heads).
//
// parallel_for(n, fn) cuts [0, n) into up to 4 contiguous chunks per thread, which the caller (thread 0,
// it works too) and the workers claim one at a time from a shared counter; it returns when every chunk
// is done. Claiming rather than assigning means a worker the OS has not scheduled yet (an oversubscribed
// machine) costs nothing: the threads that run take its chunks. Callers must not depend on which thread
// runs which chunk, or on the chunk boundaries.
//
// After a job, workers spin briefly on a generation counter, so back-to-back loops of a decode step hand
// over in about a microsecond, then sleep on a futex (std::atomic::wait) so an idle pool costs nothing.
//
// One parallel_for at a time: calls from several threads are serialized by a mutex; a call from inside a
// running fn (nesting) runs inline on the calling thread.
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
    void worker_main();
    // Claims and runs chunks of job `generation` until none is left (or another job is current).
    void run_chunks(uint32_t generation);

    int n_threads_;
    int spin_us_;
    std::vector<std::thread> workers_;
    std::mutex submit_mutex_;

    // The current job; written by the caller before it publishes the job's generation.
    const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
    int64_t n_ = 0;
    std::atomic<uint32_t> n_chunks_{0};
    alignas(64) std::atomic<uint32_t> generation_{0};  // workers wait on it
    alignas(64) std::atomic<uint64_t> claim_{0};       // generation << 32 | next chunk to claim
    alignas(64) std::atomic<uint32_t> n_done_{0};      // chunks of the current job finished
    std::atomic<bool> stop_{false};
};

}  // namespace cpu
}  // namespace troupe
