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

// A ranges job's share word: the generation's low 23 bits, the claimed bit, front and back grains (20 bits each).
constexpr int k_grain_bits = 20;
constexpr uint64_t k_grain_mask = (uint64_t{1} << k_grain_bits) - 1;
constexpr uint64_t k_claimed = uint64_t{1} << (2 * k_grain_bits);
constexpr int k_tag_shift = 2 * k_grain_bits + 1;
constexpr uint32_t k_tag_mask = (uint32_t{1} << 23) - 1;

constexpr uint64_t share_word(uint32_t generation, uint64_t front, uint64_t back) {
    return uint64_t{generation & k_tag_mask} << k_tag_shift | front << k_grain_bits | back;
}
constexpr uint64_t tag_of(uint64_t word) {
    return word >> k_tag_shift;
}

}  // namespace

thread_pool::thread_pool(int n_threads, int spin_us) : spin_us_(spin_us) {
    if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
    n_threads_ = n_threads < 1 ? 1 : n_threads;
    shares_ = std::make_unique<share[]>(n_threads_);
    workers_.reserve(n_threads_ - 1);
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
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
        const uint32_t target = n_target_;  // read while this job cannot finish
        (*fn_)(begin, end);
        if (n_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == target) n_done_.notify_one();
    }
}

int64_t thread_pool::take_grains(share& sh, uint32_t generation, bool from_front) {
    const uint64_t tag = generation & k_tag_mask;
    int64_t n_run = 0;
    for (;;) {
        uint64_t w = sh.word.load(std::memory_order_acquire);
        if (tag_of(w) != tag) return n_run;  // the job is over (all its grains were run)
        const uint64_t front = (w >> k_grain_bits) & k_grain_mask, back = w & k_grain_mask;
        if (front >= back) return n_run;
        const uint64_t grain = from_front ? front : back - 1;
        const uint64_t next = w + (from_front ? uint64_t{1} << k_grain_bits : ~uint64_t{0});  // front + 1 or back - 1
        if (!sh.word.compare_exchange_weak(w, next, std::memory_order_acq_rel)) continue;
        // The grain is ours and not yet counted: the job cannot finish before this thread reports it, so fn_,
        // grain_ and the share's bounds are this job's.
        const int64_t begin = sh.begin + static_cast<int64_t>(grain) * grain_;
        (*fn_)(begin, std::min(sh.end, begin + grain_));
        ++n_run;
    }
}

int64_t thread_pool::run_ranges(uint32_t generation, int index) {
    const uint64_t tag = generation & k_tag_mask;
    // Another job's count if this one is already over (even a chunks job's: hence the clamp), and then every
    // claim below fails on the tag.
    const int64_t n_shares = std::min<int64_t>(n_chunks_.load(std::memory_order_acquire), n_threads_);
    int64_t n_run = 0;
    bool claimed_any = false;
    // This thread's own share first, then any share nobody has claimed yet.
    for (int64_t i = 0; i < n_shares; ++i) {
        share& sh = shares_[(index + i) % n_shares];
        uint64_t w = sh.word.load(std::memory_order_acquire);
        if (tag_of(w) != tag) return n_run;  // the job is over
        if ((w & k_claimed) != 0 || !sh.word.compare_exchange_strong(w, w | k_claimed, std::memory_order_acq_rel))
            continue;
        // Unclaimed shares are never stolen from, so this one still holds all its grains (uncounted): the job
        // cannot finish before this thread reports.
        claimed_any = true;
        n_run += take_grains(sh, generation, /*from_front=*/true);
    }
    // Every share is claimed now. Only a thread that claimed one steals: one that claimed none may be late for
    // a job that is already over, while a claimant is counted in the job until it reports.
    if (!claimed_any) return n_run;
    for (int64_t i = 1; i < n_shares; ++i) {
        n_run += take_grains(shares_[(index + i) % n_shares], generation, /*from_front=*/false);
    }
    return n_run;
}

void thread_pool::run_job(uint32_t generation, int index) {
    if (kind_.load(std::memory_order_acquire) == job_kind::chunks) {
        run_chunks(generation);
        return;
    }
    const int64_t n_run = run_ranges(generation, index);
    if (n_run == 0) return;
    // This thread's grains are not counted yet, so the job is not over and n_target_ is still its own.
    const uint32_t target = n_target_;
    if (n_done_.fetch_add(static_cast<uint32_t>(n_run), std::memory_order_acq_rel) + n_run == target) {
        n_done_.notify_one();
    }
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
        run_job(gen, index);
    }
}

uint32_t thread_pool::begin_job(job_kind kind, const std::function<void(int64_t, int64_t)>& fn, int64_t n) {
    const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
    // Close the previous job's counter first: a worker that read it just before it ran out of chunks
    // must not win its compare-exchange while the fields below already describe this job (it would run
    // a chunk nobody waits for, past the end of this call).
    claim_.store(uint64_t{gen} << 32 | 0xffffffffu, std::memory_order_seq_cst);
    kind_.store(kind, std::memory_order_relaxed);
    fn_ = &fn;
    n_ = n;
    n_done_.store(0, std::memory_order_relaxed);
    return gen;
}

void thread_pool::run_published(uint32_t generation) {
    claim_.store(uint64_t{generation} << 32, std::memory_order_release);
    generation_.store(generation, std::memory_order_release);
    generation_.notify_all();
    t_inside_pool_job = true;
    run_job(generation, 0);
    t_inside_pool_job = false;
    // Work still running on workers: spin briefly, then sleep (a long chunk must not burn this core).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
    int spins = 0;
    uint32_t done = 0;
    while ((done = n_done_.load(std::memory_order_acquire)) < n_target_) {
        cpu_relax();
        if (++spins % 64 == 0 && std::chrono::steady_clock::now() > deadline)
            n_done_.wait(done, std::memory_order_acquire);
    }
    TROUPE_ASSERT(done == n_target_,
                  "thread_pool: " + std::to_string(done) + " parts finished for a job of " + std::to_string(n_target_));
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1 || t_inside_pool_job) {
        fn(0, n);
        return;
    }
    std::lock_guard lock(submit_mutex_);
    const uint32_t gen = begin_job(job_kind::chunks, fn, n);
    const auto n_chunks = static_cast<uint32_t>(std::min<int64_t>(n, int64_t{n_threads_} * k_chunks_per_thread));
    n_target_ = n_chunks;
    n_chunks_.store(n_chunks, std::memory_order_release);
    run_published(gen);
}

void thread_pool::parallel_ranges(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    // Shares of whole grains, as even as that allows.
    grain = std::max<int64_t>(1, grain);
    const int64_t n_grains = (n + grain - 1) / grain;
    const int64_t n_shares = std::min<int64_t>(n_threads_, n_grains);
    std::vector<int64_t> bounds(n_shares + 1);
    for (int64_t s = 0; s <= n_shares; ++s) bounds[s] = std::min(n, n_grains * s / n_shares * grain);
    parallel_ranges(bounds, grain, fn);
}

void thread_pool::parallel_ranges(std::span<const int64_t> bounds, int64_t grain,
                                  const std::function<void(int64_t, int64_t)>& fn) {
    TROUPE_ASSERT(bounds.size() >= 2 && bounds.size() - 1 <= static_cast<size_t>(n_threads_) && bounds.front() == 0,
                  "thread_pool::parallel_ranges: " + std::to_string(bounds.size()) + " share bounds for " +
                      std::to_string(n_threads_) + " threads");
    const int64_t n = bounds.back();
    if (n <= 0) return;
    const auto n_shares = static_cast<int64_t>(bounds.size() - 1);
    int64_t largest = 0;
    for (int64_t s = 0; s < n_shares; ++s) {
        TROUPE_ASSERT(bounds[s] <= bounds[s + 1], "thread_pool::parallel_ranges: share bounds must ascend");
        largest = std::max(largest, bounds[s + 1] - bounds[s]);
    }
    // A share's grains must fit its word.
    grain = std::max(
        {int64_t{1}, grain, (largest + static_cast<int64_t>(k_grain_mask) - 1) / static_cast<int64_t>(k_grain_mask)});
    int64_t n_grains = 0;
    for (int64_t s = 0; s < n_shares; ++s) n_grains += (bounds[s + 1] - bounds[s] + grain - 1) / grain;
    if (n_threads_ == 1 || n_grains == 1 || t_inside_pool_job) {
        fn(0, n);
        return;
    }
    std::lock_guard lock(submit_mutex_);
    const uint32_t gen = begin_job(job_kind::ranges, fn, n);
    grain_ = grain;
    for (int64_t s = 0; s < n_shares; ++s) {
        share& sh = shares_[s];
        sh.begin = bounds[s];
        sh.end = bounds[s + 1];
        const auto grains = static_cast<uint64_t>((sh.end - sh.begin + grain - 1) / grain);
        sh.word.store(share_word(gen, 0, grains), std::memory_order_relaxed);
    }
    n_target_ = static_cast<uint32_t>(n_grains);
    n_chunks_.store(static_cast<uint32_t>(n_shares), std::memory_order_release);
    run_published(gen);
}

parallel_for_fn thread_pool::as_parallel_for() {
    return [this](int64_t n, const std::function<void(int64_t, int64_t)>& fn) { parallel_for(n, fn); };
}

}  // namespace troupe::cpu
