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
// parallel_ranges(n, grain, fn) is for loops that stream memory (decode's matmuls): each thread takes one
// contiguous share of [0, n) and works through it front to back a grain at a time, then takes grains from the
// back of shares still in progress (work stealing). So every thread streams one long range, which the memory
// prefetchers serve fastest (two Zen 5 cores read ~96 KiB pieces 10-20% slower than MiB-long ones), and the
// threads finish within about a grain of each other (no chunk-sized imbalance at the end of a job). Thread i
// (the caller is thread 0, worker k is thread k + 1) takes share i when it is there in time, so memory laid out
// per share (kernels.weights: copy shards the weights so) is read by the same thread at every call.
//
// One job at a time: calls from several threads are serialized by a mutex; a call from inside a running fn
// (nesting) runs inline on the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace troupe {

// Runs fn(begin, end) over [0, n) split across worker threads; returns when all are done.
// (Same alias as core/model/ops.h, redeclared so kernels do not depend on core/model.)
using parallel_for_fn = std::function<void(int64_t n, const std::function<void(int64_t, int64_t)>& fn)>;
// Runs fn over [0, n) as thread_pool::parallel_ranges does (one contiguous share per thread, in grains): a pool's
// own, or a host's handed to a plugin (troupe_parallel version 3).
using parallel_ranges_fn =
    std::function<void(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn)>;

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
    // fn(begin, end) over [0, n) in pieces of grain items (the last one shorter), as described above.
    void parallel_ranges(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
    // The same with the shares given: share s is [bounds[s], bounds[s + 1]) (bounds ascending from 0 to n, at most
    // n_threads() shares); its grains start at bounds[s].
    void parallel_ranges(std::span<const int64_t> bounds, int64_t grain,
                         const std::function<void(int64_t, int64_t)>& fn);

    // An adapter for code that takes a parallel_for_fn (plugins, the model graph).
    parallel_for_fn as_parallel_for();

private:
    enum class job_kind : uint8_t { chunks, ranges };
    // A share of a ranges job: items [begin, end), and its grains (counted from begin) as a word: the
    // generation's low 23 bits << 41 | claimed << 40 | front << 20 | back. Claiming, taking and stealing are
    // compare-exchanges on it; the generation lets a late thread see that the job is gone.
    struct alignas(64) share {
        std::atomic<uint64_t> word{0};
        int64_t begin = 0, end = 0;
    };

    void worker_main(int index);
    // Runs job `generation` as far as thread `index` can help (or returns if another job is current).
    void run_job(uint32_t generation, int index);
    // Claims and runs chunks of job `generation` until none is left (or another job is current).
    void run_chunks(uint32_t generation);
    // Claims shares of ranges job `generation` (share `index` first) and runs them, then steals grains; returns
    // grains run.
    int64_t run_ranges(uint32_t generation, int index);
    // Runs grains of one share from its front (its claimant) or back (stealing) until it has none left or
    // the job is over; returns grains run.
    int64_t take_grains(share& sh, uint32_t generation, bool from_front);
    // Closes the previous job's claims and sets the fields every job has; returns the new generation.
    uint32_t begin_job(job_kind kind, const std::function<void(int64_t, int64_t)>& fn, int64_t n);
    // Publishes the job (its fields set) and runs it on this thread too; returns when all of it is done.
    void run_published(uint32_t generation);

    int n_threads_;
    int spin_us_;
    std::vector<std::thread> workers_;
    std::mutex submit_mutex_;

    // The current job; written by the caller before it publishes the job's generation.
    std::atomic<job_kind> kind_{job_kind::chunks};
    const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
    int64_t n_ = 0;
    int64_t grain_ = 1;                                // ranges: items per grain
    uint32_t n_target_ = 0;                            // chunks, or grains of a ranges job
    std::atomic<uint32_t> n_chunks_{0};                // chunks, or shares of a ranges job
    std::unique_ptr<share[]> shares_;                  // [n_threads_]
    alignas(64) std::atomic<uint32_t> generation_{0};  // workers wait on it
    alignas(64) std::atomic<uint64_t> claim_{0};       // generation << 32 | next chunk (or share) to claim
    alignas(64) std::atomic<uint32_t> n_done_{0};      // chunks (or grains) of the current job finished
    std::atomic<bool> stop_{false};
};

}  // namespace cpu
}  // namespace troupe
