// Summary statistics of a load run (see metrics.h).
#include "cli/bench_serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace troupe::bench {

double tpot_s(const request_record& r) {
    if (r.output_tokens <= 1) return 0.0;
    return (r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1);
}

bool meets_slo(const request_record& r, const slo_config& slo) {
    if (!r.ok) return false;
    if (slo.ttft_ms > 0 && r.ttft_s * 1e3 > slo.ttft_ms) return false;
    if (slo.tpot_ms > 0 && tpot_s(r) * 1e3 > slo.tpot_ms) return false;
    if (slo.e2e_ms > 0 && r.e2e_s * 1e3 > slo.e2e_ms) return false;
    return true;
}

double percentile(std::span<const double> sorted, double p) {
    if (sorted.empty()) return 0.0;
    const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(rank));
    const size_t hi = std::min(lo + 1, sorted.size() - 1);
    const double frac = rank - static_cast<double>(lo);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

distribution describe(std::vector<double> samples) {
    distribution d;
    d.n = samples.size();
    if (samples.empty()) return d;
    std::sort(samples.begin(), samples.end());
    const double n = static_cast<double>(samples.size());
    d.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / n;
    double var = 0.0;
    for (double x : samples) var += (x - d.mean) * (x - d.mean);
    d.std = std::sqrt(var / n);
    d.median = percentile(samples, 50);
    d.p90 = percentile(samples, 90);
    d.p99 = percentile(samples, 99);
    d.min = samples.front();
    d.max = samples.back();
    return d;
}

bench_summary summarize(std::span<const request_record> records, double duration_s, const slo_config& slo) {
    bench_summary s;
    s.duration_s = duration_s;
    s.slo_set = slo.ttft_ms > 0 || slo.tpot_ms > 0 || slo.e2e_ms > 0;
    std::vector<double> ttft, tpot, itl, e2e;
    for (const auto& r : records) {
        if (!r.ok) {
            ++s.failed;
            if (s.errors.size() < 5) s.errors.push_back(r.error);
            continue;
        }
        ++s.completed;
        s.total_input_tokens += r.prompt_tokens;
        s.total_output_tokens += r.output_tokens;
        s.requested_output_tokens += r.requested_tokens;
        ttft.push_back(r.ttft_s * 1e3);
        e2e.push_back(r.e2e_s * 1e3);
        if (r.output_tokens > 1) tpot.push_back(tpot_s(r) * 1e3);
        for (double g : r.itl_s) itl.push_back(g * 1e3);
        if (meets_slo(r, slo)) ++s.n_good;
    }
    s.ttft_ms = describe(std::move(ttft));
    s.tpot_ms = describe(std::move(tpot));
    s.itl_ms = describe(std::move(itl));
    s.e2e_ms = describe(std::move(e2e));
    if (duration_s > 0) {
        s.request_throughput = s.completed / duration_s;
        s.input_throughput = static_cast<double>(s.total_input_tokens) / duration_s;
        s.output_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
        s.total_token_throughput = static_cast<double>(s.total_input_tokens + s.total_output_tokens) / duration_s;
        s.goodput = s.n_good / duration_s;
    }
    return s;
}

}  // namespace troupe::bench
