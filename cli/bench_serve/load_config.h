// load_config: the typed form of a `troupe bench serve` experiment file (config/experiments/*.yaml).
//
// One YAML file describes one load: where the server is, what the requests look like (prompt and output
// length distributions, text source), when they arrive (Poisson, fixed spacing, or all at once), how many
// may be in flight, and the SLOs that define goodput. Reading collects every problem (unknown key, wrong
// type, out-of-range number, unknown enum name, inconsistent fields) with its path and line, like the
// engine config:
//
//   single.yaml: 2 errors:
//     single.yaml:4: arrivals.kind: unknown value 'poison' (valid: poisson, fixed, burst)
//     single.yaml:9: prompt.min_tokens: must be <= prompt.max_tokens (64), got 128
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/result.h"

namespace troupe::bench {

enum class endpoint_kind { completions, chat };
enum class arrival_kind { poisson, fixed, burst };
enum class prompt_kind { fixed, uniform, lognormal, file };
enum class output_kind { fixed, uniform, lognormal, file };

std::string_view name(endpoint_kind k);
std::string_view name(arrival_kind k);
std::string_view name(prompt_kind k);
std::string_view name(output_kind k);

struct target_config {
    std::string url = "http://127.0.0.1:8080";  // http only; --url overrides
    std::string model;                          // the requests' "model"; "": the first of GET /v1/models
    endpoint_kind endpoint = endpoint_kind::completions;
    double timeout_s = 600.0;  // per request, connect to last byte
    std::string admin_token;   // when set, /admin/api/state is polled too (exact per-request KV use)
};

struct arrival_config {
    arrival_kind kind = arrival_kind::burst;  // burst: every request at t = 0 (rate_per_s unused)
    double rate_per_s = 0.0;                  // poisson: mean rate; fixed: 1 / spacing. > 0 for both
};

// A prompt is `shared_prefix_tokens` tokens common to every request followed by its own part.
// fixed / uniform / lognormal: the own part is that many tokens of the source text from a seeded offset;
// file: the own part is one entry of the source as is (a line, a story, or a conversation's first user turn).
// lognormal: ln(length) ~ Normal(ln(median_tokens), sigma), rounded and clipped to min..max: heavy-tailed.
struct prompt_config {
    prompt_kind kind = prompt_kind::fixed;
    int32_t tokens = 128;                               // fixed
    int32_t min_tokens = 0;                             // uniform, lognormal: inclusive
    int32_t max_tokens = 0;                             // uniform, lognormal: inclusive
    int32_t median_tokens = 0;                          // lognormal; 0 = not given
    double sigma = 0.0;                                 // lognormal: standard deviation of ln(length); 0 = not given
    std::string source = "../shared/text/stories.txt";  // .txt (stories split on <|endofstory|>, else lines) or .json
    std::string tokenizer;  // a GGUF whose vocabulary counts tokens exactly; "": words approximate tokens
    int32_t shared_prefix_tokens = 0;
};

// Requested output lengths (max_tokens); with ignore_eos the server generates exactly that many.
struct output_config {
    output_kind kind = output_kind::fixed;
    int32_t tokens = 128;       // fixed
    int32_t min_tokens = 0;     // uniform, lognormal: inclusive
    int32_t max_tokens = 0;     // uniform, lognormal: inclusive
    int32_t median_tokens = 0;  // lognormal (as prompt_config); 0 = not given
    double sigma = 0.0;         // lognormal: standard deviation of ln(length); 0 = not given
    bool ignore_eos = true;
    double temperature = 0.0;
};

// Service-level objectives; 0 = no bound. Goodput counts the requests that meet every bound.
struct slo_config {
    double ttft_ms = 0.0;
    double tpot_ms = 0.0;
    double e2e_ms = 0.0;
};

struct load_config {
    std::string name;  // a label for reports; "": the file's stem
    target_config target;
    int32_t n_requests = 100;
    int32_t warmup_requests = 0;  // sent one by one before the measured run, not counted
    int32_t max_concurrency = 0;  // requests in flight at most; 0 = no cap
    uint64_t seed = 0;
    arrival_config arrivals;
    prompt_config prompt;
    output_config output;
    slo_config slo;
    double metrics_interval_s = 0.5;  // GET /metrics this often during the run (gauges, KV use); 0 = off
};

// Reads YAML text over the defaults; `source` names it in messages.
result<load_config> parse_load_config(std::string_view yaml_text, std::string_view source = "<string>");
// Reads a file, then applies "key.path=value" overrides (--set; the value is YAML) through the same checks.
// A missing file is an error naming the path. The name defaults to the file's stem.
result<load_config> load_load_config_file(const std::string& path, std::span<const std::string> overrides = {});

// The config as YAML (every key; median_tokens and sigma when given), for the report and --print-config.
std::string to_yaml(const load_config& c);

}  // namespace troupe::bench
