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

namespace troupe::cpu::detail {

// Steps of at most this many tokens split their rows (or panels) with parallel_ranges.
constexpr int64_t k_max_streamed_tokens = 16;

// Items per grain for items of item_bytes each: about 64 KiB of weights (a couple of microseconds of
// streaming, so the compare-exchange per grain is noise and the threads end within that of each other).
inline int64_t streamed_grain(int64_t item_bytes, int64_t min_items = 1) {
    constexpr int64_t k_grain_bytes = 64 << 10;
    return std::max<int64_t>(min_items, k_grain_bytes / std::max<int64_t>(1, item_bytes));
}

}  // namespace troupe::cpu::detail
