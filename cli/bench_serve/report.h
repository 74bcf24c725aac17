// report: a load run as JSON (--out) and as a Markdown table (stdout), plus the server's /metrics
// (Prometheus text) read before and after the run so that server-side figures (prefix-cache hits, KV use)
// sit beside the client-side ones.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/bench_serve/load_config.h"
#include "cli/bench_serve/metrics.h"

namespace troupe::bench {

struct metric_sample {
    std::string series;  // name with its labels as written: troupe_requests_total{status="ok"}
    double value = 0.0;
};

// Prometheus text exposition: one sample per non-comment line "series value [timestamp]"; lines that do not
// parse are skipped.
std::vector<metric_sample> parse_prometheus(std::string_view text);

struct run_report {
    load_config config;  // with the url and model actually used
    bench_summary summary;
    std::vector<request_record> requests;
    std::vector<metric_sample> metrics_before;  // empty when /metrics was not readable
    std::vector<metric_sample> metrics_after;
    bool exact_tokens = false;  // prompt lengths were counted with a tokenizer
};

std::string report_json(const run_report& r);
std::string report_markdown(const run_report& r);

}  // namespace troupe::bench
