#include "core/runtime/latency_histogram.h"

#include <algorithm>
#include <bit>

namespace troupe {
namespace {
constexpr int k_sub_bits = 6;  // 64 buckets per power of two
constexpr int64_t k_sub = int64_t{1} << k_sub_bits;
constexpr int k_max_exponent = 40;
constexpr size_t k_n_buckets = k_sub + (k_max_exponent - k_sub_bits + 1) * k_sub;
}  // namespace

latency_histogram::latency_histogram() : counts_(k_n_buckets, 0) {}

size_t latency_histogram::bucket_of(int64_t ns) {
    if (ns < k_sub) return static_cast<size_t>(std::max<int64_t>(ns, 0));
    int e = std::bit_width(static_cast<uint64_t>(ns)) - 1;  // ns in [2^e, 2^(e+1))
    if (e > k_max_exponent) return k_n_buckets - 1;
    int64_t sub = (ns >> (e - k_sub_bits)) - k_sub;  // 0..63
    return static_cast<size_t>(k_sub + (e - k_sub_bits) * k_sub + sub);
}

double latency_histogram::bucket_mid(size_t bucket) {
    if (bucket < static_cast<size_t>(k_sub)) return static_cast<double>(bucket);
    size_t rel = bucket - k_sub;
    int e = static_cast<int>(rel / k_sub) + k_sub_bits;
    int64_t sub = static_cast<int64_t>(rel % k_sub);
    int64_t width = int64_t{1} << (e - k_sub_bits);
    int64_t low = (k_sub + sub) * width;
    return static_cast<double>(low) + static_cast<double>(width) / 2.0;
}

void latency_histogram::record(int64_t ns) {
    std::lock_guard lock(mutex_);
    counts_[bucket_of(ns)]++;
    n_++;
    max_ns_ = std::max(max_ns_, ns);
    sum_ns_ += static_cast<double>(ns);
}

double latency_histogram::quantile_locked(double q) const {
    if (n_ == 0) return 0;
    // The smallest bucket whose cumulative count reaches ceil(q * n) (at least the first sample).
    int64_t rank = std::max<int64_t>(1, static_cast<int64_t>(q * static_cast<double>(n_) + 0.999999));
    int64_t seen = 0;
    for (size_t b = 0; b < counts_.size(); ++b) {
        seen += counts_[b];
        if (seen >= rank) return std::min(bucket_mid(b), static_cast<double>(max_ns_));
    }
    return static_cast<double>(max_ns_);
}

double latency_histogram::quantile_ns(double q) const {
    std::lock_guard lock(mutex_);
    return quantile_locked(q);
}

latency_summary latency_histogram::summary() const {
    std::lock_guard lock(mutex_);
    latency_summary s;
    s.n = n_;
    if (n_ == 0) return s;
    s.median_us = quantile_locked(0.5) / 1e3;
    s.p90_us = quantile_locked(0.9) / 1e3;
    s.p99_us = quantile_locked(0.99) / 1e3;
    s.max_us = static_cast<double>(max_ns_) / 1e3;
    s.mean_us = sum_ns_ / static_cast<double>(n_) / 1e3;
    return s;
}

void latency_histogram::reset() {
    std::lock_guard lock(mutex_);
    std::fill(counts_.begin(), counts_.end(), 0);
    n_ = 0;
    max_ns_ = 0;
    sum_ns_ = 0;
}

}  // namespace troupe
