// metrics_text: /metrics (Prometheus text exposition format 0.0.4) and the admin console's state JSON,
// both built from one engine_snapshot and the server's figures; plus the short history the console
// charts (one sample a second, the last five minutes).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "actors/engine/engine_snapshot.h"
#include "server/server_stats.h"

namespace troupe::server {

// Fixed facts about the served model, for the console and /v1/models.
struct model_facts {
    std::string name;           // served model name
    std::string path;           // GGUF file
    std::string chat_template;  // family name
    std::string description;    // the runner's description
    std::string device;
    int32_t context_length = 0;
    std::vector<std::string> plugins;
    std::string config_yaml;  // the effective config
};

struct history_sample {
    double t_s = 0;  // seconds since start
    double tokens_per_s = 0;
    double ttft_p50_ms = 0, ttft_p90_ms = 0, ttft_p99_ms = 0;
    double tpot_p50_ms = 0, tpot_p90_ms = 0, tpot_p99_ms = 0;
    int32_t n_running = 0, n_waiting = 0;
    int32_t kv_used = 0, kv_cached = 0, kv_free = 0;
    int32_t batch_size = 0, batch_tokens = 0;
};

// A bounded ring of samples; thread-safe.
class metrics_history {
public:
    explicit metrics_history(size_t capacity = 300) : capacity_(capacity) {}
    void add(const history_sample& s);
    std::vector<history_sample> samples() const;

private:
    size_t capacity_;
    mutable std::mutex mutex_;
    std::deque<history_sample> samples_;
};

history_sample sample_of(const engine_snapshot& s, double t_s);

std::string_view request_state_name(request_state s);

std::string prometheus_text(const engine_snapshot& s, const server_figures& f, const model_facts& m);
std::string admin_state_json(const engine_snapshot& s, const server_figures& f, const model_facts& m,
                             const std::vector<history_sample>& history);

}  // namespace troupe::server
