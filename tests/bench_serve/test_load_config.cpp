// Load experiment configs: defaults, every key, and errors with paths, lines and valid choices, all at once.
#include <gtest/gtest.h>

#include <cstdio>
#include <initializer_list>
#include <string>

#include "cli/bench_serve/load_config.h"

namespace troupe::bench {
namespace {

TEST(load_config, an_empty_file_gives_the_defaults) {
    auto c = parse_load_config("");
    ASSERT_TRUE(c) << c.message();
    EXPECT_EQ(c->target.url, "http://127.0.0.1:8080");
    EXPECT_EQ(c->target.endpoint, endpoint_kind::completions);
    EXPECT_EQ(c->arrivals.kind, arrival_kind::burst);
    EXPECT_EQ(c->n_requests, 100);
    EXPECT_TRUE(c->output.ignore_eos);
}

TEST(load_config, every_key_is_read) {
    auto c = parse_load_config(R"(
name: mixed
target: {url: "http://localhost:9000/api", model: m, endpoint: chat, timeout_s: 30}
n_requests: 200
warmup_requests: 3
max_concurrency: 16
seed: 42
arrivals: {kind: poisson, rate_per_s: 2.5}
prompt: {kind: uniform, min_tokens: 16, max_tokens: 512, source: p.txt, tokenizer: v.gguf, shared_prefix_tokens: 64}
output: {kind: uniform, min_tokens: 8, max_tokens: 256, ignore_eos: false, temperature: 0.7}
slo: {ttft_ms: 500, tpot_ms: 50, e2e_ms: 10000}
)");
    ASSERT_TRUE(c) << c.message();
    EXPECT_EQ(c->name, "mixed");
    EXPECT_EQ(c->target.url, "http://localhost:9000/api");
    EXPECT_EQ(c->target.model, "m");
    EXPECT_EQ(c->target.endpoint, endpoint_kind::chat);
    EXPECT_DOUBLE_EQ(c->target.timeout_s, 30);
    EXPECT_EQ(c->n_requests, 200);
    EXPECT_EQ(c->warmup_requests, 3);
    EXPECT_EQ(c->max_concurrency, 16);
    EXPECT_EQ(c->seed, 42u);
    EXPECT_EQ(c->arrivals.kind, arrival_kind::poisson);
    EXPECT_DOUBLE_EQ(c->arrivals.rate_per_s, 2.5);
    EXPECT_EQ(c->prompt.kind, prompt_kind::uniform);
    EXPECT_EQ(c->prompt.min_tokens, 16);
    EXPECT_EQ(c->prompt.max_tokens, 512);
    EXPECT_EQ(c->prompt.source, "p.txt");
    EXPECT_EQ(c->prompt.tokenizer, "v.gguf");
    EXPECT_EQ(c->prompt.shared_prefix_tokens, 64);
    EXPECT_EQ(c->output.kind, output_kind::uniform);
    EXPECT_EQ(c->output.min_tokens, 8);
    EXPECT_EQ(c->output.max_tokens, 256);
    EXPECT_FALSE(c->output.ignore_eos);
    EXPECT_DOUBLE_EQ(c->output.temperature, 0.7);
    EXPECT_DOUBLE_EQ(c->slo.ttft_ms, 500);
    EXPECT_DOUBLE_EQ(c->slo.tpot_ms, 50);
    EXPECT_DOUBLE_EQ(c->slo.e2e_ms, 10000);
}

TEST(load_config, printed_yaml_reads_back_to_the_same_config) {
    auto c = parse_load_config("name: x\narrivals: {kind: fixed, rate_per_s: 4}\noutput: {tokens: 7}\nseed: 9\n");
    ASSERT_TRUE(c) << c.message();
    auto back = parse_load_config(to_yaml(*c));
    ASSERT_TRUE(back) << back.message() << "\n" << to_yaml(*c);
    EXPECT_EQ(to_yaml(*back), to_yaml(*c));
    EXPECT_EQ(back->arrivals.kind, arrival_kind::fixed);
    EXPECT_EQ(back->output.tokens, 7);
}

// The long-tailed outputs of the longtail_* loads: lognormal, median 64, sigma 1, clipped to 8..512.
void expect_longtail_output(const output_config& o) {
    EXPECT_EQ(o.kind, output_kind::lognormal);
    EXPECT_EQ(o.median_tokens, 64);
    EXPECT_DOUBLE_EQ(o.sigma, 1.0);
    EXPECT_EQ(o.min_tokens, 8);
    EXPECT_EQ(o.max_tokens, 512);
}

TEST(load_config, lognormal_lengths_read_their_median_and_sigma_and_print_back) {
    auto c = parse_load_config(R"(
prompt: {kind: lognormal, median_tokens: 100, sigma: 0.5, min_tokens: 10, max_tokens: 1000}
output: {kind: lognormal, median_tokens: 64, sigma: 1.0, min_tokens: 8, max_tokens: 512}
)");
    ASSERT_TRUE(c) << c.message();
    EXPECT_EQ(c->prompt.kind, prompt_kind::lognormal);
    EXPECT_EQ(c->prompt.median_tokens, 100);
    EXPECT_DOUBLE_EQ(c->prompt.sigma, 0.5);
    EXPECT_EQ(c->prompt.min_tokens, 10);
    EXPECT_EQ(c->prompt.max_tokens, 1000);
    expect_longtail_output(c->output);
    const std::string printed = to_yaml(*c);
    EXPECT_NE(printed.find("kind: lognormal"), std::string::npos) << printed;
    EXPECT_NE(printed.find("median_tokens: 64"), std::string::npos) << printed;
    auto back = parse_load_config(printed);
    ASSERT_TRUE(back) << back.message() << "\n" << printed;
    EXPECT_EQ(to_yaml(*back), printed);
    EXPECT_DOUBLE_EQ(back->prompt.sigma, 0.5);
    // Without the lognormal keys they are left out of the printed config (0 would not read back).
    auto plain = parse_load_config("output: {tokens: 7}");
    ASSERT_TRUE(plain) << plain.message();
    EXPECT_EQ(to_yaml(*plain).find("sigma"), std::string::npos) << to_yaml(*plain);
}

TEST(load_config, an_equal_median_and_bounds_are_a_valid_lognormal) {
    auto c = parse_load_config("output: {kind: lognormal, median_tokens: 8, sigma: 2, min_tokens: 8, max_tokens: 8}");
    ASSERT_TRUE(c) << c.message();
}

// Every part is in the message.
void expect_all_in(const std::string& message, std::initializer_list<const char*> parts) {
    for (const char* part : parts) EXPECT_NE(message.find(part), std::string::npos) << part << "\n" << message;
}

struct bad_case {
    const char* yaml;
    const char* expected;  // a substring of the message
};

class load_config_errors : public ::testing::TestWithParam<bad_case> {};

TEST_P(load_config_errors, name_the_path_and_what_would_be_right) {
    auto c = parse_load_config(GetParam().yaml, "x.yaml");
    ASSERT_FALSE(c) << GetParam().yaml;
    EXPECT_NE(c.message().find(GetParam().expected), std::string::npos) << c.message();
}

INSTANTIATE_TEST_SUITE_P(
    cases, load_config_errors,
    ::testing::Values(
        bad_case{"n_reqests: 5", "x.yaml:1: n_reqests: unknown key (valid: name, target, n_requests"},
        bad_case{"arrivals: {kind: poison}", "arrivals.kind: unknown value 'poison' (valid: poisson, fixed, burst)"},
        bad_case{"arrivals: {kind: poisson}", "arrivals.rate_per_s: must be > 0 when arrivals.kind is poisson"},
        bad_case{"arrivals: {kind: fixed, rate_per_s: -1}", "arrivals.rate_per_s: must be >= 0"},
        bad_case{"n_requests: 0", "n_requests: must be between 1 and 1000000, got 0"},
        bad_case{"max_concurrency: lots", "max_concurrency: expected an integer, got 'lots'"},
        bad_case{"prompt: {kind: uniform, min_tokens: 64}", "prompt.max_tokens: required when prompt.kind is uniform"},
        bad_case{"prompt: {kind: uniform, min_tokens: 64, max_tokens: 8}",
                 "prompt.min_tokens: must be <= prompt.max_tokens (8), got 64"},
        bad_case{"output: {kind: file}", "output.kind: 'file' takes the lengths of a conversations file"},
        bad_case{"output: {ignore_eos: maybe}", "output.ignore_eos: expected true or false, got 'maybe'"},
        bad_case{"target: {endpoint: embeddings}",
                 "target.endpoint: unknown value 'embeddings' (valid: completions, chat)"},
        bad_case{"target: {url: \"https://x\"}", "target.url: expected an http:// address"},
        bad_case{"slo: {ttft_ms: fast}", "slo.ttft_ms: expected a number, got 'fast'"},
        bad_case{"slo: [1, 2]", "slo: expected a mapping, got a list"},
        bad_case{"prompt: {kind: [}", "x.yaml:1: malformed YAML"},
        bad_case{"output: {kind: lognorm}",
                 "output.kind: unknown value 'lognorm' (valid: fixed, uniform, lognormal, file)"},
        bad_case{"prompt: {kind: lognormal, median_tokens: 64, sigma: 1, max_tokens: 512}",
                 "x.yaml:1: prompt.min_tokens: required when prompt.kind is lognormal"},
        bad_case{"output: {kind: lognormal, median_tokens: 64, sigma: 1, min_tokens: 8}",
                 "x.yaml:1: output.max_tokens: required when output.kind is lognormal"},
        bad_case{"output: {kind: lognormal, sigma: 1, min_tokens: 8, max_tokens: 512}",
                 "x.yaml:1: output.median_tokens: required when output.kind is lognormal"},
        bad_case{"output: {kind: lognormal, median_tokens: 64, min_tokens: 8, max_tokens: 512}",
                 "x.yaml:1: output.sigma: required when output.kind is lognormal"},
        bad_case{"output: {kind: lognormal, median_tokens: 64, sigma: -1, min_tokens: 8, max_tokens: 512}",
                 "x.yaml:1: output.sigma: must be > 0 and <= 10, got -1"},
        bad_case{"output: {kind: lognormal, median_tokens: 64, sigma: 0, min_tokens: 8, max_tokens: 512}",
                 "output.sigma: must be > 0 and <= 10, got 0"},
        bad_case{"output: {kind: lognormal, median_tokens: 64, sigma: wide, min_tokens: 8, max_tokens: 512}",
                 "output.sigma: expected a number, got 'wide'"},
        bad_case{"output: {kind: lognormal, median_tokens: 0, sigma: 1, min_tokens: 8, max_tokens: 512}",
                 "output.median_tokens: must be between 1 and 1048576, got 0"},
        bad_case{"output: {kind: lognormal, median_tokens: 4, sigma: 1, min_tokens: 8, max_tokens: 512}",
                 "output.median_tokens: must be >= output.min_tokens (8), got 4"},
        bad_case{"prompt: {kind: lognormal, median_tokens: 600, sigma: 1, min_tokens: 8, max_tokens: 512}",
                 "prompt.median_tokens: must be <= prompt.max_tokens (512), got 600"},
        bad_case{"output: {kind: lognormal, median_tokens: 64, sigma: 1, min_tokens: 600, max_tokens: 512}",
                 "output.min_tokens: must be <= output.max_tokens (512), got 600"}));

TEST(load_config, a_lognormal_section_reports_all_its_problems_on_their_lines) {
    auto c = parse_load_config("output:\n  kind: lognormal\n  median_tokens: 1000\n  sigma: -2\n  max_tokens: 512\n",
                               "l.yaml");
    ASSERT_FALSE(c);
    expect_all_in(c.message(), {"l.yaml: 3 errors:", "l.yaml:4: output.sigma: must be > 0",
                                "l.yaml:2: output.min_tokens: required when output.kind is lognormal",
                                "l.yaml:3: output.median_tokens: must be <= output.max_tokens (512), got 1000"});
}

TEST(load_config, all_problems_are_reported_together_with_their_lines) {
    auto c = parse_load_config("n_requests: 0\narrivals:\n  kind: poison\nslo: {ttft_ms: -5}\nbogus: 1\n", "e.yaml");
    ASSERT_FALSE(c);
    expect_all_in(c.message(), {"e.yaml: 4 errors:", "e.yaml:1: n_requests", "e.yaml:3: arrivals.kind",
                                "e.yaml:4: slo.ttft_ms", "e.yaml:5: bogus: unknown key"});
}

TEST(load_config, cross_field_problems_in_two_sections_each_keep_their_own_line) {
    auto c = parse_load_config("prompt:\n  kind: uniform\noutput:\n  kind: uniform\n  min_tokens: 9\n  max_tokens: 3\n",
                               "u.yaml");
    ASSERT_FALSE(c);
    expect_all_in(c.message(),
                  {"u.yaml: 3 errors:", "u.yaml:2: prompt.min_tokens: required when prompt.kind is uniform",
                   "u.yaml:2: prompt.max_tokens: required",
                   "u.yaml:5: output.min_tokens: must be <= output.max_tokens (3), got 9"});
}

TEST(load_config, set_overrides_go_through_the_same_checks) {
    const std::string path = ::testing::TempDir() + "/set_test.yaml";
    {
        std::FILE* f = std::fopen(path.c_str(), "w");
        std::fputs("prompt: {kind: fixed, tokens: 8}\n", f);
        std::fclose(f);
    }
    const std::vector<std::string> good = {"prompt.tokens=99", "output.kind=uniform", "output.min_tokens=2",
                                           "output.max_tokens=4", "slo.ttft_ms=50"};
    auto c = load_load_config_file(path, good);
    ASSERT_TRUE(c) << c.message();
    EXPECT_EQ(c->name, "set_test");
    EXPECT_EQ(c->prompt.tokens, 99);
    EXPECT_EQ(c->output.kind, output_kind::uniform);
    EXPECT_EQ(c->output.max_tokens, 4);
    EXPECT_DOUBLE_EQ(c->slo.ttft_ms, 50);
    const std::vector<std::string> bad = {"prompt.tokns=3"};
    auto e = load_load_config_file(path, bad);
    ASSERT_FALSE(e);
    EXPECT_NE(e.message().find("prompt.tokns: unknown key"), std::string::npos) << e.message();
    const std::vector<std::string> no_eq = {"prompt.tokens"};
    EXPECT_FALSE(load_load_config_file(path, no_eq));
}

TEST(load_config, a_missing_file_is_named) {
    auto c = load_load_config_file("/nonexistent/exp.yaml");
    ASSERT_FALSE(c);
    EXPECT_NE(c.message().find("/nonexistent/exp.yaml"), std::string::npos);
}

TEST(load_config, every_shipped_experiment_is_valid) {
    for (const char* f : {"single_stream", "concurrent_16", "mixed_continuous", "mixed_static", "shared_prefix",
                          "longtail_continuous", "longtail_static", "capacity"}) {
        const std::string path = std::string(TROUPE_SOURCE_DIR) + "/config/experiments/" + f + ".yaml";
        auto c = load_load_config_file(path);
        ASSERT_TRUE(c) << c.message();
        EXPECT_EQ(c->name, f);
    }
}

TEST(load_config, the_longtail_loads_are_the_mixed_loads_with_lognormal_outputs) {
    const std::string dir = std::string(TROUPE_SOURCE_DIR) + "/config/experiments/";
    for (const char* policy : {"continuous", "static"}) {
        auto mixed = load_load_config_file(dir + "mixed_" + policy + ".yaml");
        auto longtail = load_load_config_file(dir + "longtail_" + policy + ".yaml");
        ASSERT_TRUE(mixed) << mixed.message();
        ASSERT_TRUE(longtail) << longtail.message();
        expect_longtail_output(longtail->output);
        longtail->name = mixed->name;
        longtail->output = mixed->output;
        EXPECT_EQ(to_yaml(*longtail), to_yaml(*mixed)) << policy;
    }
}

}  // namespace
}  // namespace troupe::bench
