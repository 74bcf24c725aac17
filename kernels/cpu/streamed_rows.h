// How decode-sized matmuls split their weights over the pool's threads.
//
// A step of few tokens streams every weight byte from memory once and computes little on each, so what
// limits it is how fast each thread reads. Two Zen 5 cores read ~96 KiB pieces 10-20% slower than MiB-long
// ones (the prefetchers restart with every piece), and a job whose chunks are hundreds of KiB ends with one
// thread waiting for the other's last chunk. thread_pool::parallel_ranges gives each thread one contiguous
// share and balances the end with grains stolen from the back: the matmuls of such steps run on it
// (110M F32 decode on two cores, machine at ~91 GB/s: 75% -> 82% of the bandwidth bound).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "kernels/ref/ops.h"

namespace troupe::cpu::detail {

// Steps of at most this many tokens split their rows (or panels) with parallel_ranges.
constexpr int64_t k_max_streamed_tokens = 16;

// Items per grain for items of item_bytes each: about 256 KiB of weights (~15 microseconds of streaming per thread,
// so the threads end within that of each other). Each grain is a call through the pool's std::function and the
// kernel's setup: with 64 KiB grains (one 16-row panel of a 1B matrix) decode ran slower in 16 of 20 alternated
// rounds (Zen 4, two threads, 1B Q8_0 / Q4_K and 110M Q8_0 / F32, `troupe bench --n-gen 32`: medians 25.5 ->
// 29.0, 45.2 -> 48.6, 225.7 -> 240.4, 65.7 -> 76.6 tokens/s).
inline int64_t streamed_grain(int64_t item_bytes, int64_t min_items = 1) {
    constexpr int64_t k_grain_bytes = 256 << 10;
    return std::max<int64_t>(min_items, k_grain_bytes / std::max<int64_t>(1, item_bytes));
}

// Runs fn(begin, end) over the units of w's rows (rows, or panels of unit_rows rows) with parallel_ranges in grains of
// `grain` units: one share per piece where w has one piece per thread of the pool (kernels.weights: copy lays thread
// i's pieces of every weight out back to back, so each thread streams its own region through all the matmuls of a
// step), even shares otherwise.
template <class Fn>
void stream_rows(thread_pool& pool, const matmul_weight& w, int64_t unit_rows, int64_t grain, const Fn& fn) {
    const int64_t n_units = (w.n_out + unit_rows - 1) / unit_rows;
    if (w.n_pieces != pool.n_threads()) {
        pool.parallel_ranges(n_units, grain, fn);
        return;
    }
    static thread_local std::vector<int64_t> bounds;
    bounds.resize(w.n_pieces + 1);
    for (int32_t i = 0; i < w.n_pieces; ++i) bounds[i] = w.pieces[i].row_begin / unit_rows;
    bounds[w.n_pieces] = n_units;
    pool.parallel_ranges(bounds, grain, fn);
}

// How a decode-sized step streams its rows: on the pool (aware of per-thread pieces, above), on a host's
// parallel_ranges (a plugin's, which knows no pieces), or neither (then the caller splits into chunks).
struct row_streamer {
    thread_pool* pool = nullptr;
    const parallel_ranges_fn* ranges = nullptr;
    explicit operator bool() const { return pool != nullptr || (ranges != nullptr && *ranges); }
};

template <class Fn>
void stream_rows(const row_streamer& s, const matmul_weight& w, int64_t unit_rows, int64_t grain, const Fn& fn) {
    if (s.pool != nullptr) {
        stream_rows(*s.pool, w, unit_rows, grain, fn);
        return;
    }
    (*s.ranges)((w.n_out + unit_rows - 1) / unit_rows, grain, fn);
}

}  // namespace troupe::cpu::detail
