#include "server/metrics_text.h"

#include <boost/json.hpp>

#include <cstdio>

namespace troupe::server {
namespace json = boost::json;
namespace {

// engine_snapshot's latency summaries hold milliseconds in their *_us fields (engine_snapshot.h).
constexpr double us_to_ms = 1.0;

// One metric family: HELP, TYPE, then the samples.
struct prom {
    std::string out;

    void family(const char* name, const char* type, const char* help) {
        out += "# HELP ";
        out += name;
        out += ' ';
        out += help;
        out += "\n# TYPE ";
        out += name;
        out += ' ';
        out += type;
        out += '\n';
    }
    void sample(const char* name, double value, const std::string& labels = {}) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", value);
        out += name;
        if (!labels.empty()) out += "{" + labels + "}";
        out += ' ';
        out += buf;
        out += '\n';
    }
    void one(const char* name, const char* type, const char* help, double value) {
        family(name, type, help);
        sample(name, value);
    }
    void summary(const char* name, const char* help, const latency_summary& l) {
        family(name, "summary", help);
        sample(name, l.median_us * us_to_ms, "quantile=\"0.5\"");
        sample(name, l.p90_us * us_to_ms, "quantile=\"0.9\"");
        sample(name, l.p99_us * us_to_ms, "quantile=\"0.99\"");
        sample((std::string(name) + "_sum").c_str(), l.mean_us * us_to_ms * static_cast<double>(l.n));
        sample((std::string(name) + "_count").c_str(), static_cast<double>(l.n));
    }
};

// Speculative decoding, one series per plugin (one plugin per engine today; the label keeps the series apart
// when a server is restarted with another). Absent without speculation.
void spec_metrics(prom& p, const spec_view& v) {
    if (v.plugin.empty()) return;
    const std::string l = "plugin=\"" + v.plugin + "\"";
    auto gauge = [&](const char* name, const char* help, double value) {
        p.family(name, "gauge", help);
        p.sample(name, value, l);
    };
    auto counter = [&](const char* name, const char* help, int64_t value) {
        p.family(name, "counter", help);
        p.sample(name, static_cast<double>(value), l);
    };
    gauge("troupe_spec_acceptance_rate", "Draft tokens accepted / draft positions verified.", v.acceptance_rate);
    gauge("troupe_spec_acceptance_length", "Mean tokens per target step where a proposal was verified.",
          v.acceptance_length);
    gauge("troupe_spec_draft_length", "Mean proposal depth (draft positions per verified proposal).", v.draft_length);
    gauge("troupe_spec_draft_cap", "Draft cap of the last step: 0 where the controller turned drafting off.",
          v.draft_cap);
    gauge("troupe_spec_max_draft", "Configured draft cap per sequence and step.", v.max_draft);
    gauge("troupe_spec_tokens_per_second_drafting",
          "The controller's measured rate with drafts at the last step's batch size.", v.tokens_per_s_drafting);
    gauge("troupe_spec_tokens_per_second_plain",
          "The controller's measured rate without drafts at the last step's batch size.", v.tokens_per_s_plain);
    counter("troupe_spec_proposals_total", "Proposals verified (one per sequence and step).", v.n_draft_steps);
    counter("troupe_spec_drafted_tokens_total", "Draft positions verified (proposal depths).", v.n_drafted);
    counter("troupe_spec_draft_nodes_total", "Draft tokens verified (tree nodes).", v.n_draft_nodes);
    counter("troupe_spec_accepted_tokens_total", "Draft tokens accepted.", v.n_accepted);
    p.family("troupe_spec_decode_steps_total", "counter", "Decode steps by whether they were planned with drafts.");
    p.sample("troupe_spec_decode_steps_total", static_cast<double>(v.n_steps_on), l + ",drafts=\"on\"");
    p.sample("troupe_spec_decode_steps_total", static_cast<double>(v.n_steps_off), l + ",drafts=\"off\"");
    counter("troupe_spec_controller_probes_total", "Controller windows that re-measured the mode not chosen.",
            v.n_probes);
    counter("troupe_spec_controller_switches_total", "Times the controller turned drafting off or on.", v.n_switches);
}

json::object spec_json(const spec_view& v) {
    return json::object{{"plugin", v.plugin},
                        {"max_draft", v.max_draft},
                        {"draft_cap", v.draft_cap},
                        {"adaptive", v.adaptive},
                        {"n_proposals", v.n_draft_steps},
                        {"n_drafted", v.n_drafted},
                        {"n_draft_nodes", v.n_draft_nodes},
                        {"n_accepted", v.n_accepted},
                        {"acceptance_rate", v.acceptance_rate},
                        {"acceptance_length", v.acceptance_length},
                        {"draft_length", v.draft_length},
                        {"n_steps_on", v.n_steps_on},
                        {"n_steps_off", v.n_steps_off},
                        {"n_probes", v.n_probes},
                        {"n_switches", v.n_switches},
                        {"tokens_per_s_drafting", v.tokens_per_s_drafting},
                        {"tokens_per_s_plain", v.tokens_per_s_plain}};
}

json::object latency_json(const latency_summary& l) {
    return json::object{{"n", l.n},
                        {"median_ms", l.median_us * us_to_ms},
                        {"p90_ms", l.p90_us * us_to_ms},
                        {"p99_ms", l.p99_us * us_to_ms},
                        {"max_ms", l.max_us * us_to_ms},
                        {"mean_ms", l.mean_us * us_to_ms}};
}

}  // namespace

void metrics_history::add(const history_sample& s) {
    std::lock_guard lock(mutex_);
    samples_.push_back(s);
    while (samples_.size() > capacity_) samples_.pop_front();
}

std::vector<history_sample> metrics_history::samples() const {
    std::lock_guard lock(mutex_);
    return {samples_.begin(), samples_.end()};
}

std::string_view request_state_name(request_state s) {
    switch (s) {
        case request_state::tokenizing:
            return "tokenizing";
        case request_state::waiting:
            return "waiting";
        case request_state::prefilling:
            return "prefilling";
        case request_state::decoding:
            return "decoding";
        case request_state::preempted:
            return "preempted";
        case request_state::finishing:
            return "finishing";
    }
    return "?";
}

history_sample sample_of(const engine_snapshot& s, double t_s) {
    history_sample h;
    h.t_s = t_s;
    h.tokens_per_s = s.tokens_per_s;
    h.ttft_p50_ms = s.ttft_ms.median_us * us_to_ms;
    h.ttft_p90_ms = s.ttft_ms.p90_us * us_to_ms;
    h.ttft_p99_ms = s.ttft_ms.p99_us * us_to_ms;
    h.tpot_p50_ms = s.tpot_ms.median_us * us_to_ms;
    h.tpot_p90_ms = s.tpot_ms.p90_us * us_to_ms;
    h.tpot_p99_ms = s.tpot_ms.p99_us * us_to_ms;
    for (const auto& r : s.requests) {
        const bool waiting = r.state == request_state::waiting || r.state == request_state::tokenizing ||
                             r.state == request_state::preempted;
        (waiting ? h.n_waiting : h.n_running) += 1;
    }
    h.kv_used = s.kv.n_used;
    h.kv_cached = s.kv.n_cached;
    h.kv_free = s.kv.n_free;
    h.batch_size = s.steps.last_batch_size;
    h.batch_tokens = s.steps.last_batch_tokens;
    return h;
}

std::string prometheus_text(const engine_snapshot& s, const server_figures& f, const model_facts& m) {
    const history_sample h = sample_of(s, 0);
    prom p;
    p.one("troupe_ready", "gauge", "1 when the model is loaded and requests are served.", f.ready ? 1 : 0);
    p.one("troupe_accepting", "gauge", "1 while new requests are admitted (0 while draining).",
          (f.ready && !f.draining && s.accepting) ? 1 : 0);
    p.one("troupe_requests_running", "gauge", "Requests being prefilled or decoded.", h.n_running);
    p.one("troupe_requests_waiting", "gauge", "Requests waiting to be scheduled.", h.n_waiting);
    p.family("troupe_kv_blocks", "gauge", "KV cache blocks by state: used by sequences, cached prefixes, free.");
    p.sample("troupe_kv_blocks", s.kv.n_used, "state=\"used\"");
    p.sample("troupe_kv_blocks", s.kv.n_cached, "state=\"cached\"");
    p.sample("troupe_kv_blocks", s.kv.n_free, "state=\"free\"");
    p.one("troupe_kv_blocks_total", "gauge", "KV cache blocks in the pool.", s.kv.n_blocks);
    p.one("troupe_kv_block_size_tokens", "gauge", "Tokens per KV block.", s.kv.block_size);
    p.one("troupe_prefix_cache_hit_rate", "gauge", "Prompt blocks found in the prefix cache / looked up.",
          s.kv.prefix_hit_rate);
    p.one("troupe_prefix_cache_queries_total", "counter", "Prompt blocks looked up in the prefix cache.",
          static_cast<double>(s.kv.n_prefix_queries));
    p.one("troupe_prefix_cache_hits_total", "counter", "Prompt blocks found in the prefix cache.",
          static_cast<double>(s.kv.n_prefix_hits));
    p.one("troupe_preemptions_total", "counter", "Sequences preempted for lack of KV blocks.",
          static_cast<double>(s.kv.n_preemptions));
    p.one("troupe_steps_total", "counter", "Engine steps run.", static_cast<double>(s.steps.n_steps));
    p.one("troupe_prefill_tokens_total", "counter", "Prompt positions run through the model (recomputes included).",
          static_cast<double>(s.steps.n_prefill_tokens));
    p.one("troupe_forks_total", "counter", "Choices of parallel sampling (n, best_of) forked from another's sequence.",
          static_cast<double>(s.steps.n_forks));
    p.one("troupe_forked_prompt_tokens_total", "counter",
          "Prompt tokens forked choices shared (copy-on-write KV blocks) instead of computing them.",
          static_cast<double>(s.steps.n_forked_prompt_tokens));
    p.one("troupe_batch_size", "gauge", "Sequences in the last step.", s.steps.last_batch_size);
    p.one("troupe_batch_tokens", "gauge", "Tokens in the last step.", s.steps.last_batch_tokens);
    p.one("troupe_batch_size_mean", "gauge", "Mean sequences per step over the last minute.", s.steps.mean_batch_size);
    p.one("troupe_batch_tokens_mean", "gauge", "Mean tokens per step over the last minute.", s.steps.mean_batch_tokens);
    p.one("troupe_steps_planned_ahead_total", "counter", "Steps planned while the previous step ran.",
          static_cast<double>(s.steps.n_steps_ahead));
    p.one("troupe_executor_idle_seconds_total", "counter",
          "Executor time between a step's end and the next step's start while sequences were running.",
          s.steps.executor_idle_s);
    p.one("troupe_executor_busy_seconds_total", "counter", "Executor time in the steps that followed those gaps.",
          s.steps.executor_busy_s);
    p.one("troupe_executor_idle_gaps_total", "counter", "Gaps counted in troupe_executor_idle_seconds_total.",
          static_cast<double>(s.steps.n_idle_gaps));
    p.one("troupe_executor_idle_max_seconds", "gauge", "Longest of those gaps.", s.steps.executor_idle_max_s);
    p.one("troupe_generation_tokens_per_second", "gauge", "Generated tokens per second over the last minute.",
          s.tokens_per_s);
    p.one("troupe_requests_per_second", "gauge", "Finished requests per second over the last minute.",
          s.requests_per_s);
    p.summary("troupe_time_to_first_token_milliseconds", "Submit to first token, recent requests.", s.ttft_ms);
    p.summary("troupe_time_per_output_token_milliseconds", "Mean time per output token after the first.", s.tpot_ms);
    p.summary("troupe_request_duration_milliseconds", "Submit to done, recent requests.", s.e2e_ms);
    p.family("troupe_requests_total", "counter", "Requests ended, by outcome.");
    p.sample("troupe_requests_total", static_cast<double>(s.n_completed), "outcome=\"completed\"");
    p.sample("troupe_requests_total", static_cast<double>(s.n_cancelled), "outcome=\"cancelled\"");
    p.sample("troupe_requests_total", static_cast<double>(s.n_failed), "outcome=\"failed\"");
    p.sample("troupe_requests_total", static_cast<double>(s.n_refused), "outcome=\"refused\"");
    p.one("troupe_generation_tokens_total", "counter", "Tokens generated.", static_cast<double>(s.n_generated_tokens));
    spec_metrics(p, s.spec);
    p.one("troupe_prompt_tokens_total", "counter", "Prompt tokens processed.", static_cast<double>(s.n_prompt_tokens));
    p.family("troupe_http_requests_total", "counter", "HTTP requests answered, by status class.");
    p.sample("troupe_http_requests_total", static_cast<double>(f.n_http_2xx), "code=\"2xx\"");
    p.sample("troupe_http_requests_total", static_cast<double>(f.n_http_4xx), "code=\"4xx\"");
    p.sample("troupe_http_requests_total", static_cast<double>(f.n_http_5xx), "code=\"5xx\"");
    p.one("troupe_overloaded_total", "counter", "Requests refused because the queue was full (429).",
          static_cast<double>(f.n_overloaded));
    p.one("troupe_disconnect_cancels_total", "counter", "Requests cancelled because their client disconnected.",
          static_cast<double>(f.n_disconnect_cancels));
    p.one("troupe_slow_client_closes_total", "counter", "Connections closed because the client did not read.",
          static_cast<double>(f.n_slow_client_closes));
    p.one("troupe_connections", "gauge", "Open connections (HTTP and WebSocket).",
          static_cast<double>(f.n_connections));
    p.one("troupe_websockets", "gauge", "Open WebSocket connections.", static_cast<double>(f.n_websockets));
    p.one("troupe_requests_preparing", "gauge",
          "Requests whose bodies are being parsed and prompts tokenized (off the I/O thread).",
          static_cast<double>(f.n_preparing));
    p.one("troupe_server_queue_requests", "gauge", "Server requests submitted that have no token yet.",
          static_cast<double>(f.n_queued));
    p.one("troupe_server_queue_tokens", "gauge", "Prompt tokens of those requests.",
          static_cast<double>(f.n_queued_tokens));
    p.family("troupe_model_info", "gauge", "The served model (labels), always 1.");
    p.sample("troupe_model_info", 1,
             "model=\"" + m.name + "\",chat_template=\"" + m.chat_template + "\",device=\"" + m.device + "\"");
    p.one("troupe_uptime_seconds", "gauge", "Seconds since the server started.", f.uptime_s);
    return p.out;
}

std::string admin_state_json(const engine_snapshot& s, const server_figures& f, const model_facts& m,
                             const std::vector<history_sample>& history) {
    json::array requests;
    for (const auto& r : s.requests) {
        requests.emplace_back(json::object{{"id", r.id},
                                           {"state", request_state_name(r.state)},
                                           {"age_ms", r.age_ms},
                                           {"n_prompt_tokens", r.n_prompt_tokens},
                                           {"n_computed_prompt_tokens", r.n_computed_prompt_tokens},
                                           {"n_generated_tokens", r.n_generated_tokens},
                                           {"n_cached_prompt_tokens", r.n_cached_prompt_tokens},
                                           {"n_kv_blocks", r.n_kv_blocks}});
    }
    json::array hist;
    for (const auto& h : history) {
        hist.emplace_back(json::object{{"t_s", h.t_s},
                                       {"tokens_per_s", h.tokens_per_s},
                                       {"ttft_p50_ms", h.ttft_p50_ms},
                                       {"ttft_p90_ms", h.ttft_p90_ms},
                                       {"ttft_p99_ms", h.ttft_p99_ms},
                                       {"tpot_p50_ms", h.tpot_p50_ms},
                                       {"tpot_p90_ms", h.tpot_p90_ms},
                                       {"tpot_p99_ms", h.tpot_p99_ms},
                                       {"running", h.n_running},
                                       {"waiting", h.n_waiting},
                                       {"kv_used", h.kv_used},
                                       {"kv_cached", h.kv_cached},
                                       {"kv_free", h.kv_free},
                                       {"batch_size", h.batch_size},
                                       {"batch_tokens", h.batch_tokens}});
    }
    json::array plugins;
    for (const auto& p : m.plugins) plugins.emplace_back(json::string(p));
    const history_sample now = sample_of(s, f.uptime_s);
    json::object snapshot{
        {"accepting", f.ready && !f.draining && s.accepting},
        {"n_running", now.n_running},
        {"n_waiting", now.n_waiting},
        {"requests", std::move(requests)},
        {"kv", json::object{{"block_size", s.kv.block_size},
                            {"n_blocks", s.kv.n_blocks},
                            {"n_used", s.kv.n_used},
                            {"n_cached", s.kv.n_cached},
                            {"n_free", s.kv.n_free},
                            {"n_prefix_queries", s.kv.n_prefix_queries},
                            {"n_prefix_hits", s.kv.n_prefix_hits},
                            {"prefix_hit_rate", s.kv.prefix_hit_rate},
                            {"bytes_per_block", s.kv.bytes_per_block},
                            {"n_preemptions", s.kv.n_preemptions}}},
        {"steps", json::object{{"n_steps", s.steps.n_steps},
                               {"last_batch_size", s.steps.last_batch_size},
                               {"last_batch_tokens", s.steps.last_batch_tokens},
                               {"mean_batch_size", s.steps.mean_batch_size},
                               {"mean_batch_tokens", s.steps.mean_batch_tokens},
                               {"n_prefill_tokens", s.steps.n_prefill_tokens},
                               {"n_forks", s.steps.n_forks},
                               {"n_forked_prompt_tokens", s.steps.n_forked_prompt_tokens}}},
        {"ttft_ms", latency_json(s.ttft_ms)},
        {"tpot_ms", latency_json(s.tpot_ms)},
        {"e2e_ms", latency_json(s.e2e_ms)},
        {"tokens_per_s", s.tokens_per_s},
        {"requests_per_s", s.requests_per_s},
        {"n_completed", s.n_completed},
        {"n_failed", s.n_failed},
        {"n_cancelled", s.n_cancelled},
        {"n_refused", s.n_refused},
        {"n_generated_tokens", s.n_generated_tokens},
        {"n_prompt_tokens", s.n_prompt_tokens},
        {"spec", spec_json(s.spec)},
    };
    json::object o{
        {"snapshot", std::move(snapshot)},
        {"model", json::object{{"name", m.name},
                               {"path", m.path},
                               {"description", m.description},
                               {"device", m.device},
                               {"context_length", m.context_length}}},
        {"chat_template", m.chat_template},
        {"plugins", std::move(plugins)},
        {"config_yaml", m.config_yaml},
        {"ready", f.ready},
        {"draining", f.draining},
        {"uptime_s", f.uptime_s},
        {"server", json::object{{"connections", f.n_connections},
                                {"websockets", f.n_websockets},
                                {"http_requests", f.n_http_requests},
                                {"overloaded", f.n_overloaded},
                                {"disconnect_cancels", f.n_disconnect_cancels},
                                {"slow_client_closes", f.n_slow_client_closes},
                                {"queued_requests", f.n_queued},
                                {"queued_tokens", f.n_queued_tokens},
                                {"active_requests", f.n_active}}},
        {"history", std::move(hist)},
    };
    return json::serialize(o);
}

}  // namespace troupe::server
