// load_client: the HTTP side of `troupe bench serve` (the one translation unit with Asio and Beast).
//
// One io_context on the calling thread runs everything: the requests, each started at its arrival offset
// from the run's start, or later while max_concurrency requests are in flight (a request waits for a free slot; its
// latencies count from when it is sent, as vLLM's benchmark does). Each request is its own connection: POST, then the
// SSE body read with read_some so that every chunk is timestamped when its bytes arrive. Beside them, GET /metrics
// every metrics_interval_s while requests run (warmup is a separate run_load call with a cap of one).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/bench_serve/load_config.h"
#include "cli/bench_serve/metrics.h"
#include "cli/bench_serve/openai_protocol.h"
#include "cli/bench_serve/workload.h"
#include "core/result.h"

namespace troupe::bench {

struct load_run_params {
    http_url url;
    endpoint_kind endpoint = endpoint_kind::completions;
    std::string model;
    output_config output;
    double timeout_s = 600.0;
    int32_t max_concurrency = 0;      // 0: no cap
    double metrics_interval_s = 0.0;  // 0: no polls
    std::string admin_token;          // also poll /admin/api/state with it
    std::span<const request_spec> requests;
};

struct load_run_result {
    std::vector<request_record> records;  // one per measured request, in request order
    double duration_s = 0.0;              // the run's start to the last request's end
    std::vector<metrics_poll> polls;      // GET /metrics answers during the run
};

load_run_result run_load(const load_run_params& params);

// GET base_path + path (with "Authorization: Bearer <bearer>" when given); the body when the answer is 200,
// else an error with the status and the body's start.
result<std::string> http_get(const http_url& url, std::string_view path, double timeout_s,
                             const std::string& bearer = "");

}  // namespace troupe::bench
