// troupe bench serve --config config/experiments/X.yaml: drive a running OpenAI-compatible server with a
// load described in YAML and report what vLLM's benchmark_serving reports (cli/bench_serve/ has the parts).
//
// The steps: read and check the experiment (flags override its keys), make every request up front from the
// seed, ask the server for its model when none is named, read /metrics, run the load, read /metrics again,
// print the Markdown table and write the JSON report (--out).
#include <cstdio>
#include <fstream>
#include <string>

#include "cli/bench_serve/load_client.h"
#include "cli/bench_serve/load_config.h"
#include "cli/bench_serve/report.h"
#include "cli/bench_serve/workload.h"
#include "cli/commands.h"

namespace troupe::cli {
namespace {

using namespace troupe::bench;

result<load_config> prepare(const cli_args& args) {
    auto path = args.value("--config");
    if (!path) return make_error("--config FILE is required (see config/experiments/)");
    const std::vector<std::string> sets = args.all("--set");
    auto config = load_load_config_file(*path, sets);
    if (!config) return config.err();
    std::vector<std::string> problems;
    if (auto url = args.value("--url")) config->target.url = *url;
    if (auto model = args.value("--model")) config->target.model = *model;
    if (auto v = args.value("--n-requests")) {
        auto n = parse_int_flag("--n-requests", *v);
        if (!n || *n < 1 || *n > 1000000)
            problems.push_back("--n-requests: expected an integer between 1 and 1000000, got '" + *v + "'");
        else
            config->n_requests = static_cast<int32_t>(*n);
    }
    if (auto v = args.value("--max-concurrency")) {
        auto n = parse_int_flag("--max-concurrency", *v);
        if (!n || *n < 0 || *n > 100000)
            problems.push_back("--max-concurrency: expected an integer between 0 and 100000, got '" + *v + "'");
        else
            config->max_concurrency = static_cast<int32_t>(*n);
    }
    if (auto u = parse_url(config->target.url); !u) problems.push_back(u.message());
    if (!problems.empty()) return make_error(join_problems(problems));
    return config;
}

std::string folder_of(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

int run(load_config config, const cli_args& args) {
    const std::string config_path = *args.value("--config");
    auto source = load_workload_source(config.prompt, folder_of(config_path));
    if (!source) {
        std::fprintf(stderr, "troupe bench serve: %s: %s\n", config_path.c_str(), source.message().c_str());
        return exit_failure;
    }
    auto specs = build_requests(config, *source);
    if (!specs) {
        std::fprintf(stderr, "troupe bench serve: %s\n", specs.message().c_str());
        return exit_failure;
    }
    const http_url url = *parse_url(config.target.url);
    if (config.target.model.empty()) {
        auto models = http_get(url, "/v1/models", 30.0);
        auto id = models ? first_model_id(*models) : result<std::string>(models.err());
        if (!id) {
            std::fprintf(stderr, "troupe bench serve: is a server running at %s? %s\n", config.target.url.c_str(),
                         id.message().c_str());
            return exit_failure;
        }
        config.target.model = *id;
    }
    run_report report;
    report.exact_tokens = source->exact_tokens;

    const size_t n_warm = static_cast<size_t>(config.warmup_requests);
    load_run_params params;
    params.url = url;
    params.endpoint = config.target.endpoint;
    params.model = config.target.model;
    params.output = config.output;
    params.timeout_s = config.target.timeout_s;
    std::fprintf(stderr, "troupe bench serve: %s: %d requests (+%d warmup) to %s, model %s\n", config.name.c_str(),
                 config.n_requests, config.warmup_requests, config.target.url.c_str(), config.target.model.c_str());
    if (n_warm > 0) {
        params.max_concurrency = 1;
        params.requests = std::span<const request_spec>(specs->data(), n_warm);
        const load_run_result warm = run_load(params);
        for (const auto& r : warm.records) {
            if (!r.ok) std::fprintf(stderr, "troupe bench serve: a warmup request failed: %s\n", r.error.c_str());
        }
    }
    if (auto m = http_get(url, "/metrics", 10.0)) report.metrics_before = parse_prometheus(*m);
    params.max_concurrency = config.max_concurrency;
    params.metrics_interval_s = config.metrics_interval_s;
    params.admin_token = config.target.admin_token;
    params.requests = std::span<const request_spec>(specs->data() + n_warm, specs->size() - n_warm);
    load_run_result run = run_load(params);

    if (auto m = http_get(url, "/metrics", 10.0)) report.metrics_after = parse_prometheus(*m);
    report.summary = summarize(run.records, run.duration_s, config.slo);
    report.requests = std::move(run.records);
    report.polls = std::move(run.polls);
    report.config = std::move(config);
    std::fputs(report_markdown(report).c_str(), stdout);
    if (auto out = args.value("--out")) {
        std::ofstream f(*out);
        f << report_json(report);
        if (!f) {
            std::fprintf(stderr, "troupe bench serve: cannot write %s\n", out->c_str());
            return exit_failure;
        }
    }
    if (report.summary.completed == 0) {
        std::fprintf(stderr, "troupe bench serve: every request failed; the first: %s\n",
                     report.summary.errors.empty() ? "?" : report.summary.errors[0].c_str());
        return exit_failure;
    }
    return exit_ok;
}

}  // namespace

const command_spec& bench_serve_spec() {
    static const command_spec spec = [] {
        command_spec s{
            .name = "bench serve",
            .summary = "drive a running OpenAI-compatible server with a YAML-described load and report latencies",
            .usage =
                "troupe bench serve --config config/experiments/X.yaml [--url http://127.0.0.1:8080] "
                "[--out results.json]",
        };
        s.flags.push_back({"--config", "-c", "FILE", "the load experiment (config/experiments/*.yaml)"});
        s.flags.push_back({"--url", "", "URL", "the server, overrides target.url"});
        s.flags.push_back({"--model", "", "NAME", "the requests' model, overrides target.model"});
        s.flags.push_back({"--n-requests", "", "N", "overrides n_requests"});
        s.flags.push_back({"--max-concurrency", "", "N", "overrides max_concurrency (0: no cap)"});
        s.flags.push_back({"--set", "", "KEY=VALUE", "override a key of the experiment (prompt.max_tokens=200)", true});
        s.flags.push_back({"--out", "-o", "FILE", "write the JSON report (figures, per-request records, /metrics)"});
        s.flags.push_back({"--print-config", "", "", "print the effective experiment as YAML and exit"});
        s.details =
            "Reports completed/failed, request and token throughput, TTFT / TPOT / ITL / E2E mean, median, p90 and "
            "p99, and goodput under the YAML's slo. config/experiments/run_all.sh runs the comparisons.";
        return s;
    }();
    return spec;
}

int bench_serve_command(const cli_args& args) {
    auto config = prepare(args);
    if (!config) {
        std::fprintf(stderr, "troupe bench serve: %s\n", config.message().c_str());
        return exit_usage;
    }
    if (args.has("--print-config")) {
        std::fputs(to_yaml(*config).c_str(), stdout);
        return exit_ok;
    }
    return run(std::move(*config), args);
}

}  // namespace troupe::cli
