// spec/ngram through the ABI: prompt-lookup proposals on crafted sequences.
#include <dlfcn.h>

#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

struct ngram_case {
    const char* name;
    const char* params;
    std::vector<int32_t> context;
    int32_t max_draft;
    std::vector<int32_t> expected;
};

void PrintTo(const ngram_case& c, std::ostream* os) {
    *os << c.name;
}

class ngram_plugin : public ::testing::TestWithParam<ngram_case> {};

TEST_P(ngram_plugin, proposes_the_tokens_that_followed_the_latest_earlier_occurrence_of_the_suffix) {
    const ngram_case& c = GetParam();
    plugin_host host = real_plugins();
    auto proposer = host.load_spec("ngram", yaml(c.params));
    ASSERT_TRUE(proposer.ok()) << proposer.message();
    auto draft = propose_chain(*(*proposer), c.context, c.max_draft);
    ASSERT_TRUE(draft.ok()) << draft.message();
    EXPECT_EQ(*draft, c.expected);
}

INSTANTIATE_TEST_SUITE_P(
    ngram, ngram_plugin,
    ::testing::Values(
        // "1 2 3" occurred at the start; what followed it is proposed, up to max_draft.
        ngram_case{"trigram_match", "{ngram_max: 3}", {1, 2, 3, 4, 5, 6, 9, 1, 2, 3}, 8, {4, 5, 6, 9, 1, 2, 3}},
        ngram_case{"draft_capped_by_the_caller", "{}", {1, 2, 3, 4, 5, 6, 9, 1, 2, 3}, 2, {4, 5}},
        ngram_case{"draft_capped_by_params", "{max_draft: 3}", {1, 2, 3, 4, 5, 6, 9, 1, 2, 3}, 10, {4, 5, 6}},
        // The most recent earlier occurrence wins: "7 8" is followed by 1 at first, by 2 later.
        ngram_case{"latest_occurrence_wins", "{ngram_min: 2, ngram_max: 2}", {7, 8, 1, 0, 7, 8, 2, 0, 7, 8}, 1, {2}},
        // No trigram or bigram match, so the unigram "5" is used.
        ngram_case{
            "falls_back_to_shorter_ngrams", "{ngram_min: 1, ngram_max: 3}", {5, 6, 1, 2, 3, 4, 5}, 4, {6, 1, 2, 3}},
        // ngram_min 2 forbids the unigram fallback.
        ngram_case{"no_fallback_below_ngram_min", "{ngram_min: 2, ngram_max: 3}", {5, 6, 1, 2, 3, 4, 5}, 4, {}},
        // The longer match is preferred over a more recent shorter one: "1 2 3" -> 4; "3" alone -> 9.
        ngram_case{"longest_ngram_first", "{ngram_max: 3}", {1, 2, 3, 4, 3, 9, 1, 2, 3}, 1, {4}},
        // Overlapping occurrences: the latest earlier "4 4" starts at 1 and only one token follows it.
        ngram_case{"repetition", "{ngram_max: 2}", {4, 4, 4, 4}, 3, {4}},
        ngram_case{"nothing_repeats", "{}", {1, 2, 3, 4, 5}, 5, {}}, ngram_case{"empty_context", "{}", {}, 5, {}},
        ngram_case{"single_token", "{}", {42}, 5, {}}),
    [](const ::testing::TestParamInfo<ngram_case>& info) { return std::string(info.param.name); });

TEST(ngram_plugin_params, max_draft_out_of_range_is_refused_with_the_key_the_range_and_the_value) {
    plugin_host host = real_plugins();
    auto r = host.load_spec("ngram", yaml("{max_draft: 40}"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(), "plugin spec/ngram: params.max_draft: must be between 1 and 16, got 40");
}

TEST(ngram_plugin_params, every_bad_key_is_reported_at_once) {
    plugin_host host = real_plugins();
    auto r = host.load_spec("ngram", yaml("{ngram_min: 4, ngram_max: 2, max_drafts: 3, max_draft: x}"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(),
              "plugin spec/ngram: params.max_draft: must be an integer between 1 and 16, got 'x'; "
              "params.ngram_min: must be at most ngram_max (2), got 4; "
              "params.max_drafts: unknown key (valid keys: ngram_min, ngram_max, max_draft, branches)");
}

TEST(ngram_plugin_lifetime, the_library_is_closed_when_the_last_proposer_is_gone) {
    const std::string path = std::string(TROUPE_DEFAULT_PLUGIN_DIR) + "/spec/libtroupe_spec_ngram.so";
    auto loaded = [&] {
        void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
        if (h != nullptr) dlclose(h);
        return h != nullptr;
    };
    ASSERT_FALSE(loaded()) << "another test left " << path << " loaded";
    std::shared_ptr<plugin_speculator> proposer;
    {
        plugin_host host = real_plugins();
        auto r = host.load_spec("ngram");
        ASSERT_TRUE(r.ok()) << r.message();
        proposer = *r;
    }
    EXPECT_TRUE(loaded());
    const std::vector<int32_t> context = {1, 2, 1};
    auto draft = propose_chain(*proposer, context, 4);
    ASSERT_TRUE(draft.ok()) << draft.message();
    EXPECT_EQ(*draft, (std::vector<int32_t>{2, 1}));
    proposer.reset();
    EXPECT_FALSE(loaded());
}

}  // namespace
}  // namespace troupe::testing
