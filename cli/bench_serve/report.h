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

// KV cache waste during the run: allocated token slots not holding a token, / allocated slots (per poll, then
// the mean over polls with requests running). Exact from /admin/api/state when polled: over the decoding
// requests (a prefilling one holds blocks for the chunk in flight), 1 - sum(n_computed_prompt_tokens +
// n_generated_tokens) / sum(n_kv_blocks * block_size) (a block shared through the prefix cache counts in every request
// that holds it, as vLLM counts fragmentation). Else from the server's troupe_kv_waste_ratio gauge when it has one;
// else estimated per poll as 1 - client_live_tokens / (troupe_kv_blocks{state="used"} * troupe_kv_block_size_tokens),
// over polls with requests in flight and none waiting (a waiting request holds no blocks yet), clamped to [0, 1].
struct kv_waste_figure {
    bool available = false;
    bool from_server = false;  // exact (admin state or the server's gauge), not the client's estimate
    std::string source;        // "admin_state", "server_gauge" or "client_estimate"
    double mean = 0.0;
    double max = 0.0;
    int32_t n_samples = 0;
};
kv_waste_figure kv_waste(std::span<const metrics_poll> polls);

// Prefix-cache hit rate of the run: the change of troupe_prefix_cache_hits_total over the change of
// troupe_prefix_cache_queries_total; -1 when the counters are missing or nothing was looked up.
double prefix_hit_rate(std::span<const metric_sample> before, std::span<const metric_sample> after);

struct run_report {
    load_config config;  // with the url and model actually used
    bench_summary summary;
    std::vector<request_record> requests;
    std::vector<metric_sample> metrics_before;  // empty when /metrics was not readable
    std::vector<metric_sample> metrics_after;
    std::vector<metrics_poll> polls;  // /metrics during the run
    bool exact_tokens = false;        // prompt lengths were counted with a tokenizer
};

std::string report_json(const run_report& r);
std::string report_markdown(const run_report& r);

}  // namespace troupe::bench
