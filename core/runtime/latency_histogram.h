// latency_histogram: a fixed-memory histogram of durations for quantiles (median, p90, p99).
//
// Log-linear buckets: values below 64 ns are exact; above, each power of two is split into 64
// buckets, so a reported quantile is within 1/64 (1.6%) of the true sample. Up to 2^40 ns (18 min);
// larger values land in the last bucket. record() takes a mutex (uncontended: one recording actor).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace troupe {

struct latency_summary {
    int64_t n = 0;
    double median_us = 0;
    double p90_us = 0;
    double p99_us = 0;
    double max_us = 0;
    double mean_us = 0;
};

class latency_histogram {
public:
    latency_histogram();

    void record(int64_t ns);
    latency_summary summary() const;
    // The q-quantile (0 <= q <= 1) in nanoseconds; 0 when empty.
    double quantile_ns(double q) const;
    void reset();

private:
    static size_t bucket_of(int64_t ns);
    static double bucket_mid(size_t bucket);
    double quantile_locked(double q) const;

    mutable std::mutex mutex_;
    std::vector<int64_t> counts_;  // [n_buckets]
    int64_t n_ = 0;
    int64_t max_ns_ = 0;
    double sum_ns_ = 0;
};

}  // namespace troupe
