// JSON and Markdown reports of a load run (see report.h).
#include "cli/bench_serve/report.h"

#include "cli/bench_serve/openai_protocol.h"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

namespace troupe::bench {

std::vector<metric_sample> parse_prometheus(std::string_view text) {
    std::vector<metric_sample> out;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t eol = text.find('\n', pos);
        if (eol == std::string_view::npos) eol = text.size();
        std::string_view line = text.substr(pos, eol - pos);
        pos = eol + 1;
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
        if (line.empty() || line[0] == '#') continue;
        // The series ends at the first space outside braces.
        size_t end = 0;
        bool in_labels = false, in_quotes = false;
        for (; end < line.size(); ++end) {
            const char c = line[end];
            if (in_quotes) {
                if (c == '\\')
                    ++end;
                else if (c == '"')
                    in_quotes = false;
            } else if (c == '"' && in_labels) {
                in_quotes = true;
            } else if (c == '{') {
                in_labels = true;
            } else if (c == '}') {
                in_labels = false;
            } else if (c == ' ' && !in_labels) {
                break;
            }
        }
        if (end >= line.size()) continue;
        std::string_view value = line.substr(end + 1);
        value = value.substr(0, value.find(' '));
        double v = 0;
        if (value == "NaN") {
            v = std::nan("");
        } else if (value == "+Inf") {
            v = INFINITY;
        } else if (value == "-Inf") {
            v = -INFINITY;
        } else {
            auto r = std::from_chars(value.data(), value.data() + value.size(), v);
            if (r.ec != std::errc{} || r.ptr != value.data() + value.size()) continue;
        }
        out.push_back({std::string(line.substr(0, end)), v});
    }
    return out;
}

namespace {

std::optional<double> find_series(std::span<const metric_sample> samples, std::string_view series) {
    for (const auto& m : samples) {
        if (m.series == series) return m.value;
    }
    return std::nullopt;
}

}  // namespace

// 1 - tokens / slots over the decoding requests of an /admin/api/state answer (a prefilling one holds blocks
// for the chunk being computed); nullopt when none holds blocks.
std::optional<double> admin_waste(std::string_view state_json) {
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(state_json, ec);
    if (ec || !v.is_object()) return std::nullopt;
    const auto* inner = v.as_object().if_contains("snapshot");  // troupe serve wraps the engine's snapshot
    const auto& o = inner && inner->is_object() ? inner->as_object() : v.as_object();
    const auto* kv = o.if_contains("kv");
    const auto* reqs = o.if_contains("requests");
    if (!kv || !kv->is_object() || !reqs || !reqs->is_array()) return std::nullopt;
    const auto* bs = kv->as_object().if_contains("block_size");
    if (!bs || !bs->is_number()) return std::nullopt;
    const double block = bs->to_number<double>();
    double tokens = 0, slots = 0;
    for (const auto& r : reqs->as_array()) {
        if (!r.is_object()) continue;
        const auto& q = r.as_object();
        const auto num = [&](std::string_view k) {
            const auto* x = q.if_contains(k);
            return x && x->is_number() ? x->to_number<double>() : 0.0;
        };
        const auto* state = q.if_contains("state");
        if (!state || !state->is_string() || state->as_string() != "decoding") continue;
        const double blocks = num("n_kv_blocks");
        if (blocks <= 0) continue;
        tokens += num("n_computed_prompt_tokens") + num("n_generated_tokens");
        slots += blocks * block;
    }
    if (slots <= 0) return std::nullopt;
    return std::clamp(1.0 - tokens / slots, 0.0, 1.0);
}

kv_waste_figure kv_waste(std::span<const metrics_poll> polls) {
    kv_waste_figure w;
    double sum = 0.0;
    for (const auto& p : polls) {
        const auto samples = parse_prometheus(p.text);
        double waste = 0.0;
        if (!p.admin_state.empty()) {
            const auto a = admin_waste(p.admin_state);
            if (!a) continue;
            w.from_server = true;
            w.source = "admin_state";
            waste = *a;
        } else if (auto server = find_series(samples, "troupe_kv_waste_ratio")) {
            w.source = "server_gauge";
            if (p.n_in_flight == 0) continue;
            w.from_server = true;
            waste = *server;
        } else {
            const auto used = find_series(samples, "troupe_kv_blocks{state=\"used\"}");
            const auto block = find_series(samples, "troupe_kv_block_size_tokens");
            const auto waiting = find_series(samples, "troupe_requests_waiting");
            if (!used || !block || *used <= 0 || p.n_in_flight == 0 || (waiting && *waiting > 0)) continue;
            w.source = "client_estimate";
            const double slots = *used * *block;
            waste = std::clamp(1.0 - static_cast<double>(p.client_live_tokens) / slots, 0.0, 1.0);
        }
        sum += waste;
        w.max = std::max(w.max, waste);
        ++w.n_samples;
    }
    w.available = w.n_samples > 0;
    if (w.available) w.mean = sum / w.n_samples;
    return w;
}

double prefix_hit_rate(std::span<const metric_sample> before, std::span<const metric_sample> after) {
    const auto h0 = find_series(before, "troupe_prefix_cache_hits_total");
    const auto q0 = find_series(before, "troupe_prefix_cache_queries_total");
    const auto h1 = find_series(after, "troupe_prefix_cache_hits_total");
    const auto q1 = find_series(after, "troupe_prefix_cache_queries_total");
    if (!h0 || !q0 || !h1 || !q1 || *q1 - *q0 <= 0) return -1.0;
    return (*h1 - *h0) / (*q1 - *q0);
}

namespace {

// Mean and max of every gauge-like series over the polls.
boost::json::object gauges_json(std::span<const metrics_poll> polls) {
    std::map<std::string, std::pair<double, double>> sum_max;
    std::map<std::string, int> count;
    for (const auto& p : polls) {
        for (const auto& m : parse_prometheus(p.text)) {
            if (!std::isfinite(m.value)) continue;
            auto& [sum, mx] = sum_max[m.series];
            if (count[m.series]++ == 0) mx = m.value;
            sum += m.value;
            mx = std::max(mx, m.value);
        }
    }
    boost::json::object o;
    for (const auto& [series, v] : sum_max) {
        o[series] = {{"mean", v.first / count[series]}, {"max", v.second}, {"n", count[series]}};
    }
    return o;
}

boost::json::object dist_json(const distribution& d) {
    return {{"n", d.n},     {"mean", d.mean}, {"std", d.std}, {"median", d.median},
            {"p90", d.p90}, {"p99", d.p99},   {"min", d.min}, {"max", d.max}};
}

double finite(double v) {
    return std::isfinite(v) ? v : 0.0;
}

// Server series whose names say something about batching and the KV cache, before/after/delta.
std::vector<std::pair<std::string, std::pair<double, double>>> server_rows(const run_report& r) {
    std::map<std::string, double> before;
    for (const auto& m : r.metrics_before) before[m.series] = m.value;
    std::vector<std::pair<std::string, std::pair<double, double>>> rows;
    for (const auto& m : r.metrics_after) {
        auto it = before.find(m.series);
        rows.push_back({m.series, {it == before.end() ? 0.0 : it->second, m.value}});
    }
    return rows;
}

bool interesting(std::string_view series) {
    for (std::string_view k : {"prefix", "kv", "cache", "waste", "batch", "preempt", "running", "waiting"}) {
        if (series.find(k) != std::string_view::npos) return true;
    }
    return false;
}

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

}  // namespace

std::string report_json(const run_report& r) {
    const bench_summary& s = r.summary;
    boost::json::object o;
    o["name"] = r.config.name;
    o["url"] = r.config.target.url;
    o["model"] = r.config.target.model;
    o["endpoint"] = std::string(name(r.config.target.endpoint));
    o["arrivals"] = std::string(name(r.config.arrivals.kind));
    o["request_rate"] = r.config.arrivals.rate_per_s;
    o["max_concurrency"] = r.config.max_concurrency;
    o["n_requests"] = r.config.n_requests;
    o["exact_prompt_tokens"] = r.exact_tokens;
    o["completed"] = s.completed;
    o["failed"] = s.failed;
    o["duration_s"] = s.duration_s;
    o["total_input_tokens"] = s.total_input_tokens;
    o["total_output_tokens"] = s.total_output_tokens;
    o["requested_output_tokens"] = s.requested_output_tokens;
    o["request_throughput"] = s.request_throughput;
    o["input_throughput"] = s.input_throughput;
    o["output_throughput"] = s.output_throughput;
    o["total_token_throughput"] = s.total_token_throughput;
    o["ttft_ms"] = dist_json(s.ttft_ms);
    o["tpot_ms"] = dist_json(s.tpot_ms);
    o["itl_ms"] = dist_json(s.itl_ms);
    o["e2e_ms"] = dist_json(s.e2e_ms);
    o["slo"] = {{"ttft_ms", r.config.slo.ttft_ms}, {"tpot_ms", r.config.slo.tpot_ms}, {"e2e_ms", r.config.slo.e2e_ms}};
    o["good_requests"] = s.n_good;
    o["goodput"] = s.goodput;
    boost::json::array errors;
    for (const auto& e : s.errors) errors.push_back(boost::json::string(e));
    o["errors"] = std::move(errors);
    boost::json::object server;
    for (const auto& [series, v] : server_rows(r)) {
        server[series] = {
            {"before", finite(v.first)}, {"after", finite(v.second)}, {"delta", finite(v.second - v.first)}};
    }
    o["server_metrics"] = std::move(server);
    o["server_gauges_during_run"] = gauges_json(r.polls);
    const kv_waste_figure w = kv_waste(r.polls);
    o["kv_waste"] = {
        {"available", w.available}, {"source", w.source}, {"mean", w.mean}, {"max", w.max}, {"n_samples", w.n_samples}};
    o["prefix_cache_hit_rate"] = prefix_hit_rate(r.metrics_before, r.metrics_after);
    boost::json::array reqs;
    for (const auto& q : r.requests) {
        boost::json::array itl;
        for (double g : q.itl_s) itl.push_back(g * 1e3);
        reqs.push_back({{"ok", q.ok},
                        {"error", q.error},
                        {"start_s", q.start_s},
                        {"ttft_ms", q.ttft_s * 1e3},
                        {"e2e_ms", q.e2e_s * 1e3},
                        {"tpot_ms", tpot_s(q) * 1e3},
                        {"prompt_tokens", q.prompt_tokens},
                        {"output_tokens", q.output_tokens},
                        {"requested_tokens", q.requested_tokens},
                        {"usage_reported", q.usage_reported},
                        {"itl_ms", std::move(itl)}});
    }
    o["requests"] = std::move(reqs);
    o["config_yaml"] = to_yaml(r.config);
    return boost::json::serialize(o) + "\n";
}

std::string report_markdown(const run_report& r) {
    const bench_summary& s = r.summary;
    std::string m = "## " + r.config.name + "\n\n";
    m += "| metric | value |\n| --- | ---: |\n";
    auto row = [&](const std::string& k, const std::string& v) { m += "| " + k + " | " + v + " |\n"; };
    row("model", r.config.target.model);
    row("endpoint", std::string(endpoint_path(r.config.target.endpoint)));
    row("arrivals",
        std::string(name(r.config.arrivals.kind)) +
            (r.config.arrivals.kind == arrival_kind::burst ? "" : fmt(" %.2f/s", r.config.arrivals.rate_per_s)));
    row("max concurrency", r.config.max_concurrency == 0 ? "none" : std::to_string(r.config.max_concurrency));
    row("completed / failed", std::to_string(s.completed) + " / " + std::to_string(s.failed));
    row("duration (s)", fmt("%.2f", s.duration_s));
    row("input tokens", std::to_string(s.total_input_tokens));
    row("output tokens",
        std::to_string(s.total_output_tokens) + " (requested " + std::to_string(s.requested_output_tokens) + ")");
    row("request throughput (req/s)", fmt("%.2f", s.request_throughput));
    row("input token throughput (tok/s)", fmt("%.1f", s.input_throughput));
    row("output token throughput (tok/s)", fmt("%.1f", s.output_throughput));
    row("total token throughput (tok/s)", fmt("%.1f", s.total_token_throughput));
    if (s.slo_set) {
        std::string slo;
        if (r.config.slo.ttft_ms > 0) slo += fmt("TTFT <= %g ms ", r.config.slo.ttft_ms);
        if (r.config.slo.tpot_ms > 0) slo += fmt("TPOT <= %g ms ", r.config.slo.tpot_ms);
        if (r.config.slo.e2e_ms > 0) slo += fmt("E2E <= %g ms ", r.config.slo.e2e_ms);
        row("goodput (req/s) " + slo, fmt("%.2f", s.goodput) + " (" + std::to_string(s.n_good) + " requests)");
    }
    m += "\n| latency (ms) | mean | median | p90 | p99 |\n| --- | ---: | ---: | ---: | ---: |\n";
    auto lat = [&](const char* k, const distribution& d) {
        m += std::string("| ") + k + " | " + fmt("%.2f", d.mean) + " | " + fmt("%.2f", d.median) + " | " +
             fmt("%.2f", d.p90) + " | " + fmt("%.2f", d.p99) + " |\n";
    };
    lat("TTFT", s.ttft_ms);
    lat("TPOT", s.tpot_ms);
    lat("ITL", s.itl_ms);
    lat("E2E", s.e2e_ms);
    if (const double hit = prefix_hit_rate(r.metrics_before, r.metrics_after); hit >= 0) {
        m += "\n" + fmt("prefix-cache hit rate during the run: %.1f%%", 100 * hit) + "\n";
    }
    if (const kv_waste_figure w = kv_waste(r.polls); w.available) {
        m += fmt("KV waste (allocated slots without a token): mean %.1f%%", 100 * w.mean) +
             fmt(", max %.1f%%", 100 * w.max) + " over " + std::to_string(w.n_samples) + " polls" +
             (w.from_server ? " (" + w.source + ")" : " (estimated from the client's token counts)") + "\n";
    }
    bool header = false;
    for (const auto& [series, v] : server_rows(r)) {
        if (!interesting(series)) continue;
        if (!header) m += "\n| server metric | before | after | delta |\n| --- | ---: | ---: | ---: |\n";
        header = true;
        m += "| `" + series + "` | " + fmt("%g", v.first) + " | " + fmt("%g", v.second) + " | " +
             fmt("%g", v.second - v.first) + " |\n";
    }
    if (!s.errors.empty()) {
        m += "\nfirst errors:\n";
        for (const auto& e : s.errors) m += "- " + e + "\n";
    }
    return m;
}

}  // namespace troupe::bench
