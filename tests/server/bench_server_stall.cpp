// bench_server_stall: does a burst of large prompts stall the front end? (issue 11.2's figure)
//
// Starts the server in process on a real model (default: ../shared/models/stories260K.gguf, the
// default config otherwise), keeps a streamed completion running and polls /health every 5 ms, then
// sends ten 1 MB prompts at once. Prints the p99 and longest /health latency and the longest gap
// between a running stream's events while the prompts are handled, beside the same figures before
// them, and beside the limit a single thread would impose: the measured time to parse and tokenize
// one such prompt, times the number of prompts. A benchmark, not a test: it prints and exits 0.
//
//   bench_server_stall [--model FILE] [--prompts 10] [--prompt-bytes 1000000]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "core/tokenizer/tokenizer.h"
#include "server/request_parser.h"
#include "tests/common/shared_data.h"
#include "tests/server/live_server.h"
#include "tests/server/loopback_client.h"
#include "tests/server/stall_probe.h"

namespace {
using namespace troupe;
using namespace troupe::testing;
using ms = std::chrono::duration<double, std::milli>;

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const auto i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

struct latency_window {
    size_t n = 0;
    double p50 = 0, p99 = 0, max = 0;
    int n_failed = 0;
};

latency_window health_in(const std::vector<probe_sample>& samples, stall_clock::time_point from,
                         stall_clock::time_point to) {
    latency_window f;
    std::vector<double> lat;
    for (const auto& s : samples) {
        if (s.sent < from || s.sent > to) continue;
        if (s.answered == stall_clock::time_point{}) {
            f.n_failed++;
            continue;
        }
        lat.push_back(ms(s.answered - s.sent).count());
    }
    f.n = lat.size();
    f.p50 = percentile(lat, 0.5);
    f.p99 = percentile(lat, 0.99);
    f.max = lat.empty() ? 0 : *std::max_element(lat.begin(), lat.end());
    return f;
}

double median_gap_ms(const std::vector<std::vector<stall_clock::time_point>>& arrivals, stall_clock::time_point from,
                     stall_clock::time_point to, size_t& n) {
    std::vector<double> gaps;
    for (const auto& s : arrivals) {
        for (size_t i = 1; i < s.size(); ++i) {
            if (s[i] >= from && s[i] <= to) gaps.push_back(ms(s[i] - s[i - 1]).count());
        }
    }
    n = gaps.size();
    return percentile(gaps, 0.5);
}

const char* flag(int argc, char** argv, const char* name, const char* fallback) {
    for (int i = 1; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
    return fallback;
}

}  // namespace

int main(int argc, char** argv) {
    std::string model_path = flag(argc, argv, "--model", "");
    if (model_path.empty()) {
        auto found = shared_file("models/stories260K.gguf");
        if (!found) {
            std::fprintf(stderr, "bench_server_stall: %s; or pass --model FILE\n",
                         missing_shared_message("models/stories260K.gguf").c_str());
            return 1;
        }
        model_path = *found;
    }
    const int n_prompts = std::atoi(flag(argc, argv, "--prompts", "10"));
    const auto prompt_bytes = static_cast<size_t>(std::atoll(flag(argc, argv, "--prompt-bytes", "1000000")));
    if (n_prompts < 1 || prompt_bytes < 1) {
        std::fprintf(stderr, "bench_server_stall: --prompts and --prompt-bytes must be positive\n");
        return 1;
    }

    engine_config config = test_config(model_path);
    config.server.max_body_bytes = static_cast<int64_t>(prompt_bytes) * 2 + 4096;
    config.server.max_send_queue_bytes = 4 << 20;
    std::string error;
    auto live = start_live_server(config, false, error);
    if (!live) {
        std::fprintf(stderr, "bench_server_stall: cannot start the server: %s\n", error.c_str());
        return 1;
    }
    const uint16_t port = live->port;
    auto models = http_call(port, "GET", "/v1/models");
    int64_t n_ctx = 256;
    {
        boost::system::error_code ec;
        auto v = boost::json::parse(models.body, ec);
        if (!ec) n_ctx = v.at("data").at(0).at("context_length").to_number<int64_t>();
    }

    // The limit: one thread doing every prompt's parse and tokenization in turn.
    const std::string big = big_prompt_body(prompt_bytes);
    const auto t0 = stall_clock::now();
    auto parsed = server::parse_completion_request(big, config.sampling);
    size_t n_tokens = 0;
    if (auto* r = std::get_if<server::generation_request>(&parsed))
        n_tokens = live->model.tok->encode(r->prompt, true, true).size();
    const double one_ms = ms(stall_clock::now() - t0).count();

    const std::string stream_body = R"({"prompt":"Once upon a time","stream":true,"temperature":0,"ignore_eos":true,)"
                                    R"("max_tokens":)" +
                                    std::to_string(std::max<int64_t>(16, n_ctx - 16)) + "}";
    http_poller health(port, std::chrono::milliseconds(5));
    stream_watch stream(port, stream_body);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const auto t_storm = stall_clock::now();
    const auto answers = big_prompt_storm(port, big, n_prompts, 120000);
    auto t_end = t_storm;
    std::map<int, int> statuses;
    for (const auto& a : answers) {
        statuses[a.status]++;
        t_end = std::max(t_end, a.answered);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    health.stop();
    stream.stop();

    const auto samples = health.samples();
    const auto arrivals = stream.arrivals();
    const latency_window before = health_in(samples, t_storm - std::chrono::seconds(1), t_storm);
    const latency_window during = health_in(samples, t_storm, t_end);
    size_t n_before = 0, n_during = 0;
    const double gap_before_med = median_gap_ms(arrivals, t_storm - std::chrono::seconds(1), t_storm, n_before);
    const double gap_during_med = median_gap_ms(arrivals, t_storm, t_end, n_during);
    const double gap_before = longest_gap_ms(arrivals, t_storm - std::chrono::seconds(1), t_storm);
    const double gap_during = longest_gap_ms(arrivals, t_storm, t_end);

    std::printf("bench_server_stall: %s (context %lld), %d prompts of %zu bytes at once\n", model_path.c_str(),
                static_cast<long long>(n_ctx), n_prompts, prompt_bytes);
    std::printf("limit: one prompt parsed + tokenized on one thread: %.1f ms (%zu tokens); %d in turn: %.0f ms\n",
                one_ms, n_tokens, n_prompts, one_ms * n_prompts);
    std::printf("storm: every answer after %.0f ms; statuses:", ms(t_end - t_storm).count());
    for (const auto& [status, n] : statuses) std::printf(" %d x%d", status, n);
    std::printf(
        "\n\n| figure | before the prompts (1 s) | while they are handled | target |\n| --- | --- | --- | --- |\n");
    std::printf("| /health answers | %zu | %zu (%d failed) | |\n", before.n, during.n, during.n_failed);
    std::printf("| /health p50 latency | %.2f ms | %.2f ms | |\n", before.p50, during.p50);
    std::printf("| /health p99 latency | %.2f ms | %.2f ms | < 50 ms |\n", before.p99, during.p99);
    std::printf("| /health longest latency | %.2f ms | %.2f ms | |\n", before.max, during.max);
    std::printf("| stream events | %zu | %zu | |\n", n_before, n_during);
    std::printf("| stream median gap | %.2f ms | %.2f ms | |\n", gap_before_med, gap_during_med);
    std::printf("| stream longest gap | %.2f ms | %.2f ms | < 50 ms |\n", gap_before, gap_during);
    if (!stream.error().empty()) std::printf("stream error: %s\n", stream.error().c_str());
    return 0;
}
