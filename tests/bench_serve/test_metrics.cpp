// Statistics of a load run: percentiles, TPOT, goodput, throughputs, and the reports that carry them.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "cli/bench_serve/metrics.h"
#include "cli/bench_serve/report.h"

namespace troupe::bench {
namespace {

TEST(percentile, interpolates_linearly_between_ranks_like_numpy) {
    const std::vector<double> s = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    EXPECT_DOUBLE_EQ(percentile(s, 0), 1);
    EXPECT_DOUBLE_EQ(percentile(s, 50), 5.5);
    EXPECT_DOUBLE_EQ(percentile(s, 90), 9.1);   // numpy.percentile(range(1, 11), 90)
    EXPECT_DOUBLE_EQ(percentile(s, 99), 9.91);  // numpy.percentile(range(1, 11), 99)
    EXPECT_DOUBLE_EQ(percentile(s, 100), 10);
    EXPECT_DOUBLE_EQ(percentile(std::vector<double>{7}, 99), 7);
    EXPECT_DOUBLE_EQ(percentile(std::vector<double>{}, 50), 0);
}

TEST(describe, gives_mean_median_and_tails_of_unsorted_samples) {
    auto d = describe({4, 1, 3, 2});
    EXPECT_EQ(d.n, 4u);
    EXPECT_DOUBLE_EQ(d.mean, 2.5);
    EXPECT_DOUBLE_EQ(d.median, 2.5);
    EXPECT_DOUBLE_EQ(d.p90, 3.7);
    EXPECT_DOUBLE_EQ(d.min, 1);
    EXPECT_DOUBLE_EQ(d.max, 4);
    EXPECT_NEAR(d.std, 1.118034, 1e-6);
}

request_record ok_record(double ttft, double e2e, int32_t out, int32_t in = 10) {
    request_record r;
    r.ok = true;
    r.ttft_s = ttft;
    r.e2e_s = e2e;
    r.output_tokens = out;
    r.requested_tokens = out;
    r.prompt_tokens = in;
    return r;
}

TEST(tpot, is_the_decode_time_per_token_after_the_first) {
    EXPECT_DOUBLE_EQ(tpot_s(ok_record(0.1, 1.1, 11)), 0.1);
    EXPECT_DOUBLE_EQ(tpot_s(ok_record(0.1, 0.1, 1)), 0.0);
}

TEST(goodput, counts_only_completed_requests_within_every_bound) {
    slo_config slo{200, 50, 0};
    EXPECT_TRUE(meets_slo(ok_record(0.1, 0.5, 11), slo));   // TPOT 40 ms
    EXPECT_FALSE(meets_slo(ok_record(0.3, 0.5, 11), slo));  // TTFT 300 ms
    EXPECT_FALSE(meets_slo(ok_record(0.1, 1.1, 11), slo));  // TPOT 100 ms
    request_record failed = ok_record(0.01, 0.02, 2);
    failed.ok = false;
    EXPECT_FALSE(meets_slo(failed, slo));
    EXPECT_TRUE(meets_slo(ok_record(9, 99, 2), slo_config{}));  // no bounds
}

TEST(summarize, totals_throughputs_and_goodput_over_the_duration) {
    std::vector<request_record> rs = {ok_record(0.1, 1.1, 11, 20), ok_record(0.3, 0.8, 6, 30),
                                      ok_record(0.2, 0.4, 1, 5)};
    rs[0].itl_s = {0.1, 0.1};
    rs[1].itl_s = {0.3};
    request_record bad;
    bad.error = "HTTP 503: overloaded";
    rs.push_back(bad);
    auto s = summarize(rs, 2.0, slo_config{250, 0, 0});
    EXPECT_EQ(s.completed, 3);
    EXPECT_EQ(s.failed, 1);
    EXPECT_EQ(s.total_input_tokens, 55);
    EXPECT_EQ(s.total_output_tokens, 18);
    EXPECT_DOUBLE_EQ(s.request_throughput, 1.5);
    EXPECT_DOUBLE_EQ(s.input_throughput, 27.5);
    EXPECT_DOUBLE_EQ(s.output_throughput, 9.0);
    EXPECT_DOUBLE_EQ(s.total_token_throughput, 36.5);
    EXPECT_EQ(s.n_good, 2);  // TTFT 300 ms misses
    EXPECT_DOUBLE_EQ(s.goodput, 1.0);
    EXPECT_EQ(s.tpot_ms.n, 2u);  // one-token outputs have no TPOT
    EXPECT_DOUBLE_EQ(s.tpot_ms.mean, 100.0);
    EXPECT_EQ(s.itl_ms.n, 3u);
    EXPECT_NEAR(s.itl_ms.median, 100.0, 1e-9);
    EXPECT_DOUBLE_EQ(s.ttft_ms.median, 200.0);
    ASSERT_EQ(s.errors.size(), 1u);
    EXPECT_EQ(s.errors[0], "HTTP 503: overloaded");
}

TEST(prometheus, samples_keep_their_labels_and_skip_comments) {
    auto m = parse_prometheus(
        "# HELP x y\n# TYPE troupe_requests_total counter\ntroupe_requests_total{status=\"ok\",a=\"b c\"} 12\n"
        "troupe_kv_usage_ratio 0.25 1700000000\nbroken line\ntroupe_nan NaN\n");
    ASSERT_EQ(m.size(), 3u);
    EXPECT_EQ(m[0].series, "troupe_requests_total{status=\"ok\",a=\"b c\"}");
    EXPECT_DOUBLE_EQ(m[0].value, 12);
    EXPECT_EQ(m[1].series, "troupe_kv_usage_ratio");
    EXPECT_DOUBLE_EQ(m[1].value, 0.25);
}

std::string kv_text(int used, int waiting, const char* extra = "") {
    return "troupe_kv_blocks{state=\"used\"} " + std::to_string(used) +
           "\ntroupe_kv_blocks{state=\"free\"} 100\ntroupe_kv_block_size_tokens 16\ntroupe_requests_waiting " +
           std::to_string(waiting) + "\n" + extra;
}

TEST(kv_waste, is_estimated_from_used_blocks_and_the_clients_live_tokens) {
    std::vector<metrics_poll> polls = {
        {0.0, kv_text(10, 0), 152, 2},  // 160 slots, 152 tokens: 5%
        {0.5, kv_text(10, 0), 144, 2},  // 10%
        {1.0, kv_text(10, 3), 10, 5},   // requests waiting: skipped
        {1.5, kv_text(0, 0), 0, 0},     // idle: skipped
    };
    const kv_waste_figure w = kv_waste(polls);
    ASSERT_TRUE(w.available);
    EXPECT_FALSE(w.from_server);
    EXPECT_EQ(w.n_samples, 2);
    EXPECT_NEAR(w.mean, 0.075, 1e-12);
    EXPECT_NEAR(w.max, 0.10, 1e-12);
}

TEST(kv_waste, prefers_the_servers_own_ratio) {
    std::vector<metrics_poll> polls = {{0.0, kv_text(10, 0, "troupe_kv_waste_ratio 0.02\n"), 1, 1}};
    const kv_waste_figure w = kv_waste(polls);
    ASSERT_TRUE(w.available);
    EXPECT_TRUE(w.from_server);
    EXPECT_DOUBLE_EQ(w.mean, 0.02);
    EXPECT_FALSE(kv_waste(std::vector<metrics_poll>{{0.0, "other 1\n", 5, 1}}).available);
}

TEST(kv_waste, is_exact_from_the_admin_state_of_running_requests) {
    // 2 decoding requests: 3 blocks of 16 for 40 tokens, 2 blocks for 30 tokens; a prefilling one (blocks for
    // its chunk in flight) and a waiting one do not count.
    const std::string state = R"({"snapshot": {"kv": {"block_size": 16, "n_used": 5}, "requests": [
        {"state": "decoding", "n_computed_prompt_tokens": 30, "n_generated_tokens": 10, "n_kv_blocks": 3},
        {"state": "decoding", "n_computed_prompt_tokens": 29, "n_generated_tokens": 1, "n_kv_blocks": 2},
        {"state": "prefilling", "n_computed_prompt_tokens": 16, "n_generated_tokens": 0, "n_kv_blocks": 8},
        {"state": "waiting", "n_computed_prompt_tokens": 0, "n_generated_tokens": 0, "n_kv_blocks": 0}]},
        "model": {"name": "m"}})";
    metrics_poll p{0.0, kv_text(5, 1), 0, 3};
    p.admin_state = state;
    const kv_waste_figure w = kv_waste(std::vector<metrics_poll>{p});
    ASSERT_TRUE(w.available);
    EXPECT_EQ(w.source, "admin_state");
    EXPECT_NEAR(w.mean, 1.0 - 70.0 / 80.0, 1e-12);
    metrics_poll idle{0.0, kv_text(0, 0), 0, 0};
    idle.admin_state = R"({"kv": {"block_size": 16}, "requests": []})";
    EXPECT_FALSE(kv_waste(std::vector<metrics_poll>{idle}).available);
}

TEST(prefix_hit_rate, is_the_change_of_hits_over_the_change_of_lookups) {
    std::vector<metric_sample> before = {{"troupe_prefix_cache_hits_total", 10},
                                         {"troupe_prefix_cache_queries_total", 20}};
    std::vector<metric_sample> after = {{"troupe_prefix_cache_hits_total", 100},
                                        {"troupe_prefix_cache_queries_total", 120}};
    EXPECT_DOUBLE_EQ(prefix_hit_rate(before, after), 0.9);
    EXPECT_EQ(prefix_hit_rate(before, before), -1.0);
    EXPECT_EQ(prefix_hit_rate({}, after), -1.0);
}

TEST(report, json_and_markdown_carry_every_figure) {
    run_report r;
    r.config.name = "exp";
    r.config.target.model = "m";
    r.config.slo.ttft_ms = 250;
    r.requests = {ok_record(0.1, 1.1, 11, 20), ok_record(0.3, 0.8, 6, 30)};
    r.summary = summarize(r.requests, 2.0, r.config.slo);
    r.metrics_before = {{"troupe_prefix_cache_hits_total", 5}, {"troupe_prefix_cache_queries_total", 10}};
    r.metrics_after = {{"troupe_prefix_cache_hits_total", 45},
                       {"troupe_prefix_cache_queries_total", 60},
                       {"troupe_http_requests_total", 2}};
    r.polls = {{0.1, kv_text(4, 0), 61, 2}, {0.2, kv_text(4, 0), 64, 2}};
    const std::string json = report_json(r);
    boost::system::error_code ec;
    auto v = boost::json::parse(json, ec);
    ASSERT_FALSE(ec) << json;
    const auto& o = v.as_object();
    for (const char* k :
         {"completed", "failed", "duration_s", "request_throughput", "input_throughput", "output_throughput",
          "total_token_throughput", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "goodput", "server_metrics",
          "server_gauges_during_run", "kv_waste", "prefix_cache_hit_rate", "requests", "config_yaml"}) {
        EXPECT_TRUE(o.contains(k)) << k;
    }
    EXPECT_EQ(o.at("completed").as_int64(), 2);
    EXPECT_DOUBLE_EQ(o.at("goodput").as_double(), 0.5);
    EXPECT_DOUBLE_EQ(o.at("ttft_ms").as_object().at("p99").as_double(), percentile(std::vector<double>{100, 300}, 99));
    EXPECT_DOUBLE_EQ(
        o.at("server_metrics").as_object().at("troupe_prefix_cache_hits_total").as_object().at("delta").as_double(),
        40);
    EXPECT_DOUBLE_EQ(o.at("prefix_cache_hit_rate").as_double(), 0.8);
    EXPECT_NEAR(o.at("kv_waste").as_object().at("mean").as_double(), 0.5 * (3.0 / 64), 1e-12);
    EXPECT_DOUBLE_EQ(o.at("server_gauges_during_run")
                         .as_object()
                         .at("troupe_kv_blocks{state=\"used\"}")
                         .as_object()
                         .at("max")
                         .as_double(),
                     4);
    const std::string md = report_markdown(r);
    for (const char* k :
         {"## exp", "| completed / failed | 2 / 0 |", "| request throughput (req/s) | 1.00 |",
          "output token throughput", "| TTFT | 200.00 | 200.00 |", "| TPOT |", "| ITL |", "| E2E |",
          "goodput (req/s) TTFT <= 250 ms", "`troupe_prefix_cache_hits_total` | 5 | 45 | 40",
          "prefix-cache hit rate during the run: 80.0%", "KV waste (allocated slots without a token): mean 2.3%"}) {
        EXPECT_NE(md.find(k), std::string::npos) << k << "\n" << md;
    }
    EXPECT_EQ(md.find("troupe_http_requests_total"), std::string::npos);  // only cache / batch series in the table
}

}  // namespace
}  // namespace troupe::bench
