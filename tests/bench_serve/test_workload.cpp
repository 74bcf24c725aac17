// Workloads: arrival processes, length distributions, prompts cut from a corpus, conversation files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "cli/bench_serve/workload.h"
#include "tests/common/shared_data.h"

namespace troupe::bench {
namespace {

TEST(arrivals, poisson_gaps_have_the_configured_mean_rate_and_unit_variation) {
    const int32_t n = 20000;
    const double rate = 5.0;
    auto t = arrival_times({arrival_kind::poisson, rate}, n, 7);
    ASSERT_EQ(t.size(), static_cast<size_t>(n));
    EXPECT_EQ(t[0], 0.0);
    std::vector<double> gaps;
    for (int32_t i = 1; i < n; ++i) {
        ASSERT_GE(t[i], t[i - 1]);
        gaps.push_back(t[i] - t[i - 1]);
    }
    const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / gaps.size();
    double var = 0;
    for (double g : gaps) var += (g - mean) * (g - mean);
    const double sd = std::sqrt(var / gaps.size());
    // The mean of n exponential gaps has standard error (1/rate)/sqrt(n) = 0.0014: allow 5 of them.
    EXPECT_NEAR(mean, 1.0 / rate, 5 * (1.0 / rate) / std::sqrt(double(n)));
    EXPECT_NEAR(sd / mean, 1.0, 0.05);  // exponential: coefficient of variation 1
    // Counts per 1 s window are Poisson(5): variance equals the mean.
    std::vector<int> per_second(static_cast<size_t>(t.back()) + 1, 0);
    for (double x : t) ++per_second[static_cast<size_t>(x)];
    per_second.pop_back();  // the last window is partial
    double m = 0, v = 0;
    for (int c : per_second) m += c;
    m /= per_second.size();
    for (int c : per_second) v += (c - m) * (c - m);
    v /= per_second.size();
    EXPECT_NEAR(v / m, 1.0, 0.15);
}

TEST(arrivals, the_same_seed_gives_the_same_times_and_another_seed_differs) {
    auto a = arrival_times({arrival_kind::poisson, 2.0}, 50, 1);
    auto b = arrival_times({arrival_kind::poisson, 2.0}, 50, 1);
    auto c = arrival_times({arrival_kind::poisson, 2.0}, 50, 2);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
}

TEST(arrivals, fixed_rate_spaces_requests_evenly) {
    auto t = arrival_times({arrival_kind::fixed, 4.0}, 5, 0);
    ASSERT_EQ(t.size(), 5u);
    for (size_t i = 0; i < t.size(); ++i) EXPECT_DOUBLE_EQ(t[i], 0.25 * i);
}

TEST(arrivals, a_burst_sends_everything_at_once) {
    auto t = arrival_times({arrival_kind::burst, 0.0}, 8, 0);
    EXPECT_EQ(t, std::vector<double>(8, 0.0));
}

TEST(lengths, fixed_lengths_are_all_equal) {
    std::mt19937_64 rng(1);
    EXPECT_EQ(sample_lengths({.kind = length_kind::fixed, .tokens = 33}, 4, rng), std::vector<int32_t>(4, 33));
}

TEST(lengths, uniform_lengths_cover_the_inclusive_range_evenly) {
    std::mt19937_64 rng(3);
    auto v = sample_lengths({.kind = length_kind::uniform, .min_tokens = 10, .max_tokens = 14}, 5000, rng);
    std::vector<int> count(5, 0);
    for (int32_t x : v) {
        ASSERT_GE(x, 10);
        ASSERT_LE(x, 14);
        ++count[x - 10];
    }
    for (int c : count) EXPECT_NEAR(c, 1000, 150);  // ~4.5 standard deviations
}

length_distribution longtail(int32_t median, double sigma, int32_t lo, int32_t hi) {
    return {
        .kind = length_kind::lognormal, .min_tokens = lo, .max_tokens = hi, .median_tokens = median, .sigma = sigma};
}

// The q-quantile of sorted values (nearest rank).
double quantile(const std::vector<int32_t>& sorted, double q) {
    return sorted[static_cast<size_t>(q * static_cast<double>(sorted.size() - 1))];
}

TEST(lengths, lognormal_lengths_have_the_median_and_the_log_spread_asked_for_within_the_bounds) {
    std::mt19937_64 rng(11);
    const int32_t n = 20000;
    auto v = sample_lengths(longtail(64, 1.0, 8, 512), n, rng);
    ASSERT_EQ(v.size(), static_cast<size_t>(n));
    for (int32_t x : v) {
        ASSERT_GE(x, 8);
        ASSERT_LE(x, 512);
    }
    std::sort(v.begin(), v.end());
    // The sample median's standard error on the log scale is 1.25 sigma / sqrt(n) = 0.9%, 0.6 tokens at 64.
    EXPECT_NEAR(quantile(v, 0.5), 64, 3);
    // ln(q75 / q25) = 2 * 0.674 sigma for a normal ln(length).
    EXPECT_NEAR(std::log(quantile(v, 0.75) / quantile(v, 0.25)) / 1.349, 1.0, 0.05);
    // Heavy tail: P(length > 4 * median) = P(Z > ln 4) = 8.3%. The clips hold what rounds to 512 = 8 * median,
    // P(Z > ln(511.5 / 64)) = 1.9%, and to 8 = median / 8, P(Z < ln(8.5 / 64)) = 2.2%.
    const auto above = [&](int32_t t) { return double(v.end() - std::upper_bound(v.begin(), v.end(), t)) / n; };
    EXPECT_NEAR(above(256), 0.0825, 0.01);
    EXPECT_NEAR(double(std::count(v.begin(), v.end(), 512)) / n, 0.0188, 0.005);
    EXPECT_NEAR(double(std::count(v.begin(), v.end(), 8)) / n, 0.0218, 0.005);
    // The long tail pulls the mean far above the median: about 100 here (64 e^(sigma^2 / 2) before clipping).
    EXPECT_NEAR(std::accumulate(v.begin(), v.end(), 0.0) / n, 100.5, 4);
}

TEST(lengths, lognormal_lengths_are_fixed_by_the_seed) {
    std::mt19937_64 a(5), b(5), c(6);
    const auto dist = longtail(100, 0.8, 1, 4000);
    const auto va = sample_lengths(dist, 200, a);
    EXPECT_EQ(va, sample_lengths(dist, 200, b));
    EXPECT_NE(va, sample_lengths(dist, 200, c));
}

TEST(lengths, a_narrow_lognormal_clipped_to_one_value_gives_that_value) {
    std::mt19937_64 rng(2);
    EXPECT_EQ(sample_lengths(longtail(7, 3.0, 7, 7), 50, rng), std::vector<int32_t>(50, 7));
}

TEST(lengths, config_kinds_map_to_their_distributions) {
    output_config o;
    o.kind = output_kind::lognormal;
    o.median_tokens = 64;
    o.sigma = 1.0;
    o.min_tokens = 8;
    o.max_tokens = 512;
    const auto d = output_lengths(o);
    EXPECT_EQ(d.kind, length_kind::lognormal);
    EXPECT_EQ(d.median_tokens, 64);
    EXPECT_DOUBLE_EQ(d.sigma, 1.0);
    EXPECT_EQ(d.max_tokens, 512);
    o.kind = output_kind::file;
    EXPECT_EQ(output_lengths(o).kind, length_kind::fixed);
    prompt_config p;
    p.kind = prompt_kind::uniform;
    EXPECT_EQ(prompt_lengths(p).kind, length_kind::uniform);
    p.kind = prompt_kind::lognormal;
    EXPECT_EQ(prompt_lengths(p).kind, length_kind::lognormal);
}

TEST(corpus, take_cuts_n_words_and_wraps_around) {
    auto c = text_corpus::from_words("a b c\nd  e");
    EXPECT_EQ(c.size(), 5u);
    EXPECT_EQ(c.take(1, 3), "b c d");
    EXPECT_EQ(c.take(4, 3), "e a b");
    EXPECT_EQ(c.take(0, 0), "");
}

TEST(corpus, token_corpora_render_through_the_decoder) {
    auto c = text_corpus::from_tokens({10, 11, 12}, [](std::span<const int32_t> ids) {
        std::string s;
        for (int32_t id : ids) s += std::to_string(id) + ";";
        return s;
    });
    EXPECT_EQ(c.take(2, 2), "12;10;");
}

TEST(sources, stories_split_on_their_separator_and_other_text_on_lines) {
    auto stories = split_text_entries("One day.\nThe end.\n<|endofstory|>\nTwo.\n<|endofstory|>\nThree.");
    ASSERT_EQ(stories.size(), 3u);
    EXPECT_EQ(stories[0].prompt, "One day.\nThe end.");
    EXPECT_EQ(stories[2].prompt, "Three.");
    auto lines = split_text_entries("first line\n\n  second line \n");
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[1].prompt, "second line");
}

TEST(sources, conversations_take_the_first_user_turn_and_the_reply_after_it) {
    auto e = parse_conversations(R"([
      {"conversations": [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "hello you all"}]},
      {"conversations": [{"from": "gpt", "value": "orphan"}]},
      {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                    {"role": "assistant", "content": "a b"}]}
    ])",
                                 "c.json");
    ASSERT_TRUE(e) << e.message();
    ASSERT_EQ(e->size(), 2u);
    EXPECT_EQ((*e)[0].prompt, "hi there");
    EXPECT_EQ((*e)[0].reply, "hello you all");
    EXPECT_EQ((*e)[1].prompt, "q");
    EXPECT_EQ((*e)[1].reply, "a b");
    EXPECT_FALSE(parse_conversations("{", "c.json"));
    auto none = parse_conversations("[]", "c.json");
    ASSERT_FALSE(none);
    EXPECT_NE(none.message().find("c.json: no conversation"), std::string::npos);
}

load_config base_config() {
    load_config c;
    c.n_requests = 20;
    c.warmup_requests = 2;
    c.seed = 5;
    c.arrivals = {arrival_kind::fixed, 10.0};
    return c;
}

TEST(requests, fixed_prompts_have_the_asked_length_and_warmups_come_first) {
    std::string text;
    for (int i = 0; i < 300; ++i) text += "w" + std::to_string(i) + " ";
    auto src = words_source(text, {{"x", ""}});
    load_config c = base_config();
    c.prompt.tokens = 12;
    c.output.tokens = 9;
    auto r = build_requests(c, src);
    ASSERT_TRUE(r) << r.message();
    ASSERT_EQ(r->size(), 22u);
    std::set<std::string> distinct;
    for (size_t i = 0; i < r->size(); ++i) {
        EXPECT_EQ((*r)[i].prompt_tokens, 12);
        EXPECT_EQ((*r)[i].max_tokens, 9);
        distinct.insert((*r)[i].prompt);
    }
    EXPECT_GT(distinct.size(), 15u);  // seeded offsets differ
    EXPECT_EQ((*r)[0].arrival_s, 0.0);
    EXPECT_EQ((*r)[1].arrival_s, 0.0);
    EXPECT_DOUBLE_EQ((*r)[3].arrival_s, 0.1);  // measured request 1 at 1/rate
    auto again = build_requests(c, src);
    EXPECT_EQ((*again)[7].prompt, (*r)[7].prompt);
}

TEST(requests, a_shared_prefix_starts_every_prompt) {
    std::string text;
    for (int i = 0; i < 500; ++i) text += "t" + std::to_string(i) + " ";
    auto src = words_source(text, {{"x", ""}});
    load_config c = base_config();
    c.prompt.shared_prefix_tokens = 50;
    c.prompt.kind = prompt_kind::uniform;
    c.prompt.min_tokens = 5;
    c.prompt.max_tokens = 15;
    auto r = build_requests(c, src);
    ASSERT_TRUE(r) << r.message();
    const std::string prefix = src.corpus.take(0, 50);
    for (const auto& q : *r) {
        EXPECT_EQ(q.prompt.substr(0, prefix.size()), prefix);
        EXPECT_GE(q.prompt_tokens, 55);
        EXPECT_LE(q.prompt_tokens, 65);
    }
}

TEST(requests, lognormal_prompt_and_output_lengths_are_drawn_within_bounds_and_repeat_with_the_seed) {
    std::string text;
    for (int i = 0; i < 1000; ++i) text += "u" + std::to_string(i) + " ";
    auto src = words_source(text, {{"x", ""}});
    load_config c = base_config();
    c.n_requests = 200;
    c.prompt.kind = prompt_kind::lognormal;
    c.prompt.median_tokens = 20;
    c.prompt.sigma = 0.7;
    c.prompt.min_tokens = 4;
    c.prompt.max_tokens = 100;
    c.output.kind = output_kind::lognormal;
    c.output.median_tokens = 64;
    c.output.sigma = 1.0;
    c.output.min_tokens = 8;
    c.output.max_tokens = 512;
    auto r = build_requests(c, src);
    ASSERT_TRUE(r) << r.message();
    std::set<int32_t> outputs;
    for (const auto& q : *r) {
        EXPECT_GE(q.prompt_tokens, 4);
        EXPECT_LE(q.prompt_tokens, 100);
        EXPECT_GE(q.max_tokens, 8);
        EXPECT_LE(q.max_tokens, 512);
        outputs.insert(q.max_tokens);
    }
    EXPECT_GT(outputs.size(), 50u);
    auto again = build_requests(c, src);
    ASSERT_TRUE(again);
    for (size_t i = 0; i < r->size(); ++i) {
        EXPECT_EQ((*again)[i].max_tokens, (*r)[i].max_tokens);
        EXPECT_EQ((*again)[i].prompt, (*r)[i].prompt);
    }
    c.seed = 6;
    auto other = build_requests(c, src);
    ASSERT_TRUE(other);
    int32_t n_same = 0;
    for (size_t i = 0; i < r->size(); ++i) n_same += (*other)[i].max_tokens == (*r)[i].max_tokens;
    EXPECT_LT(n_same, 40);
}

TEST(requests, file_prompts_use_entries_and_conversation_reply_lengths) {
    auto src = words_source("", {{"p one", "r r r"}, {"p two", "r r r r r"}});
    load_config c = base_config();
    c.prompt.kind = prompt_kind::file;
    c.prompt.source = "c.json";
    c.output.kind = output_kind::file;
    auto r = build_requests(c, src);
    ASSERT_TRUE(r) << r.message();
    for (const auto& q : *r) {
        ASSERT_TRUE(q.prompt == "p one" || q.prompt == "p two") << q.prompt;
        EXPECT_EQ(q.max_tokens, q.prompt == "p one" ? 3 : 5);
        EXPECT_EQ(q.prompt_tokens, 2);
    }
}

TEST(requests, a_tokenizer_counts_prompt_tokens_exactly) {
    TROUPE_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
    TROUPE_REQUIRE_SHARED(stories, "text/stories.txt");
    prompt_config p;
    p.source = stories;
    p.tokenizer = vocab;
    auto src = load_workload_source(p, "");
    ASSERT_TRUE(src) << src.message();
    EXPECT_TRUE(src->exact_tokens);
    EXPECT_GT(src->corpus.size(), 7000u);  // 7240 words are more tokens than that
    load_config c = base_config();
    c.prompt = p;
    c.prompt.tokens = 64;
    auto r = build_requests(c, *src);
    ASSERT_TRUE(r) << r.message();
    for (const auto& q : *r) EXPECT_NEAR(q.prompt_tokens, 64, 3) << q.prompt;  // re-encoding may merge at edges
}

TEST(requests, an_unreadable_source_is_named) {
    prompt_config p;
    p.source = "no/such/file.txt";
    auto src = load_workload_source(p, "/tmp");
    ASSERT_FALSE(src);
    EXPECT_NE(src.message().find("no/such/file.txt"), std::string::npos) << src.message();
}

}  // namespace
}  // namespace troupe::bench
