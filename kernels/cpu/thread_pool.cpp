#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/result.h"

namespace troupe::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

constexpr int k_chunks_per_thread = 4;

thread_local bool t_inside_pool_job = false;

}  // namespace

thread_pool::thread_pool(int n_threads, int spin_us) : spin_us_(spin_us) {
    if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
    n_threads_ = n_threads < 1 ? 1 : n_threads;
    workers_.reserve(n_threads_ - 1);
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_main(); });
}

thread_pool::~thread_pool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& w : workers_) w.join();
}

void thread_pool::run_chunks(uint32_t generation) {
    for (;;) {
        uint64_t c = claim_.load(std::memory_order_acquire);
        // A claim succeeds only while the job is `generation` and has chunks left; once a chunk is ours
        // the job cannot finish (the caller waits for it), so fn_, n_ and n_chunks_ are this job's.
        if (static_cast<uint32_t>(c >> 32) != generation) return;
        const uint32_t chunk = static_cast<uint32_t>(c);
        // Acquire: if this is already the next job's n_chunks_, the closing store of claim_ that precedes it
        // in parallel_for is visible to the compare-exchange below, which then fails.
        if (chunk >= n_chunks_.load(std::memory_order_acquire)) return;
        if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) continue;
        const int64_t n_chunks = n_chunks_.load(std::memory_order_relaxed);
        const int64_t begin = n_ * chunk / n_chunks;
        const int64_t end = n_ * (chunk + 1) / n_chunks;
        (*fn_)(begin, end);
        if (n_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_chunks) n_done_.notify_one();
    }
}

void thread_pool::worker_main() {
    t_inside_pool_job = true;  // a worker's fn that calls parallel_for runs it inline
    uint32_t seen = 0;
    for (;;) {
        uint32_t gen = generation_.load(std::memory_order_acquire);
        if (gen == seen) {
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
            int spins = 0;
            while ((gen = generation_.load(std::memory_order_acquire)) == seen) {
                cpu_relax();
                if (++spins % 64 == 0 && std::chrono::steady_clock::now() > deadline) {
                    generation_.wait(seen, std::memory_order_acquire);
                }
            }
        }
        seen = gen;
        if (stop_.load(std::memory_order_relaxed)) return;
        run_chunks(gen);
    }
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1 || t_inside_pool_job) {
        fn(0, n);
        return;
    }
    std::lock_guard lock(submit_mutex_);
    const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
    // Close the previous job's counter first: a worker that read it just before it ran out of chunks
    // must not win its compare-exchange while the fields below already describe this job (it would run
    // a chunk nobody waits for, past the end of this call).
    claim_.store(uint64_t{gen} << 32 | 0xffffffffu, std::memory_order_seq_cst);
    fn_ = &fn;
    n_ = n;
    const auto n_chunks = static_cast<uint32_t>(std::min<int64_t>(n, int64_t{n_threads_} * k_chunks_per_thread));
    n_chunks_.store(n_chunks, std::memory_order_release);
    n_done_.store(0, std::memory_order_relaxed);
    claim_.store(uint64_t{gen} << 32, std::memory_order_release);
    generation_.store(gen, std::memory_order_release);
    generation_.notify_all();
    t_inside_pool_job = true;
    run_chunks(gen);
    t_inside_pool_job = false;
    // Chunks still running on workers: spin briefly, then sleep (a long chunk must not burn this core).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
    int spins = 0;
    uint32_t done = 0;
    while ((done = n_done_.load(std::memory_order_acquire)) < n_chunks) {
        cpu_relax();
        if (++spins % 64 == 0 && std::chrono::steady_clock::now() > deadline)
            n_done_.wait(done, std::memory_order_acquire);
    }
    TROUPE_ASSERT(done == n_chunks,
                  "thread_pool: " + std::to_string(done) + " chunks finished for a job of " + std::to_string(n_chunks));
}

parallel_for_fn thread_pool::as_parallel_for() {
    return [this](int64_t n, const std::function<void(int64_t, int64_t)>& fn) { parallel_for(n, fn); };
}

}  // namespace troupe::cpu
