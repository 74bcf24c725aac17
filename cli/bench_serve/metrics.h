// metrics: per-request records of a load run and their summary, as vLLM's benchmark_serving computes it.
//
//   TTFT  first token chunk - request sent              ITL   gaps between successive token chunks
//   E2E   last byte - request sent                      TPOT  (E2E - TTFT) / (output_tokens - 1), n > 1
//   throughputs: totals / duration (first send to last completion); goodput: requests meeting every SLO / duration
// Percentiles interpolate linearly between the two nearest ranks (numpy's default): rank = p/100 * (n - 1).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cli/bench_serve/load_config.h"

namespace troupe::bench {

struct request_record {
    bool ok = false;
    std::string error;             // why it failed
    double start_s = 0.0;          // sent, from the run's start
    double ttft_s = 0.0;           // first token chunk, from start_s
    double e2e_s = 0.0;            // last byte, from start_s
    std::vector<double> itl_s;     // gaps between successive token chunks
    int32_t prompt_tokens = 0;     // the server's usage when given, else the workload's count
    int32_t output_tokens = 0;     // the server's usage when given, else the token chunks
    int32_t requested_tokens = 0;  // max_tokens sent
    bool usage_reported = false;
};

// (E2E - TTFT) / (output_tokens - 1); 0 when output_tokens <= 1.
double tpot_s(const request_record& r);
// Every bound of the SLO (0 = none) met; failed requests meet none.
bool meets_slo(const request_record& r, const slo_config& slo);

// Linear interpolation between the nearest ranks of a sorted sample; 0 for an empty one.
double percentile(std::span<const double> sorted, double p);

// One GET /metrics during a run, with what the client knew at that instant.
struct metrics_poll {
    double t_s = 0.0;                // from the run's start
    std::string text;                // the Prometheus text
    int64_t client_live_tokens = 0;  // prompt tokens + tokens received of the requests in flight
    int32_t n_in_flight = 0;
    std::string admin_state{};  // GET /admin/api/state (JSON) when an admin token is given, else ""
};

struct distribution {
    size_t n = 0;
    double mean = 0, std = 0, median = 0, p90 = 0, p99 = 0, min = 0, max = 0;  // in the samples' unit
};
// Summary of samples (any order).
distribution describe(std::vector<double> samples);

struct bench_summary {
    int32_t completed = 0;
    int32_t failed = 0;
    double duration_s = 0.0;
    int64_t total_input_tokens = 0;
    int64_t total_output_tokens = 0;
    int64_t requested_output_tokens = 0;  // sum of max_tokens over completed requests
    double request_throughput = 0.0;      // completed requests / s
    double input_throughput = 0.0;        // tokens / s
    double output_throughput = 0.0;       // tokens / s
    double total_token_throughput = 0.0;  // tokens / s
    distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
    int32_t n_good = 0;               // completed and within every SLO
    double goodput = 0.0;             // n_good / duration
    bool slo_set = false;             // any SLO bound given
    std::vector<std::string> errors;  // the first few failures' messages
};

bench_summary summarize(std::span<const request_record> records, double duration_s, const slo_config& slo);

}  // namespace troupe::bench
