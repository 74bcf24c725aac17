#include "kernels/cpu/thread_pool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace troupe::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

thread_local bool t_inside_pool_job = false;

}  // namespace

thread_pool::thread_pool(int n_threads, int spin_us) : spin_us_(spin_us) {
    if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
    n_threads_ = n_threads < 1 ? 1 : n_threads;
    workers_.reserve(n_threads_ - 1);
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

thread_pool::~thread_pool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& w : workers_) w.join();
}

void thread_pool::run_range(int index) {
    const int64_t begin = n_ * index / n_threads_;
    const int64_t end = n_ * (index + 1) / n_threads_;
    if (begin < end) (*fn_)(begin, end);
}

void thread_pool::worker_main(int index) {
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
        run_range(index);
        n_done_.fetch_add(1, std::memory_order_acq_rel);
    }
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1 || t_inside_pool_job) {
        fn(0, n);
        return;
    }
    std::lock_guard lock(submit_mutex_);
    fn_ = &fn;
    n_ = n;
    n_done_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    t_inside_pool_job = true;
    run_range(0);
    t_inside_pool_job = false;
    const int n_workers = n_threads_ - 1;
    while (n_done_.load(std::memory_order_acquire) != n_workers) cpu_relax();
    fn_ = nullptr;
}

parallel_for_fn thread_pool::as_parallel_for() {
    return [this](int64_t n, const std::function<void(int64_t, int64_t)>& fn) { parallel_for(n, fn); };
}

}  // namespace troupe::cpu
