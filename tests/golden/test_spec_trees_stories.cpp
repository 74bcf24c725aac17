// Speculative decoding with trees of drafts, end to end on stories260K: the engine, the executor's verification,
// cpu_llama's tree attention (attention/gqa) and keep_tree_path together. A speculator that knows the golden
// continuation proposes trees in which the right token is never the first child, with wrong branches below right
// ones: greedy output must still be the golden's, accepted paths must run through second children (so rows move),
// and fewer target steps must be needed than without drafts.
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "actors/engine/engine.h"
#include "actors/tokenizer/tokenizer_codec.h"
#include "core/loader/model_loader.h"
#include "core/runtime/lane.h"
#include "core/tokenizer/incremental_detokenizer.h"
#include "tests/actors/sink_recorder.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"
#include "tests/golden/golden_runs.h"

namespace troupe {
namespace {

// Proposes, after a context that is a prefix of `story`, the tree
//
//   root ─┬─ node 0: wrong
//         └─ node 1: story[n] ─┬─ node 2: wrong
//                              └─ node 3: story[n+1] ── node 4: story[n+2] ── node 5: wrong
//
// (as much of it as max_nodes allows). Off the story it proposes nothing.
class golden_tree_speculator final : public speculator {
public:
    golden_tree_speculator(std::vector<int32_t> story, int32_t n_vocab) : story_(std::move(story)), n_vocab_(n_vocab) {}
    std::string name() const override { return "test/golden-tree"; }
    int32_t max_nodes() const override { return 6; }
    status begin(int64_t, std::span<const int32_t>) override { return {}; }
    status propose(std::span<const draft_request> requests, std::span<draft_tree> out) override {
        for (size_t r = 0; r < requests.size(); ++r) {
            out[r].clear();
            const auto ctx = requests[r].tokens;
            const size_t n = ctx.size();
            if (n + 3 > story_.size() || !std::equal(ctx.begin(), ctx.end(), story_.begin())) continue;
            auto wrong = [&](int32_t t) { return (t + 1) % n_vocab_; };
            const std::vector<int32_t> tokens = {wrong(story_[n]), story_[n],     wrong(story_[n + 1]),
                                                 story_[n + 1],    story_[n + 2], wrong(story_[n + 2])};
            const std::vector<int32_t> parents = {-1, -1, 1, 1, 3, 4};
            const auto k = static_cast<size_t>(std::min<int32_t>(requests[r].max_nodes, 6));
            out[r].tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(k));
            out[r].parents.assign(parents.begin(), parents.begin() + static_cast<std::ptrdiff_t>(k));
        }
        return {};
    }
    status accepted(int64_t, std::span<const int32_t> tokens, std::span<const int32_t> nodes) override {
        for (size_t i = 0; i + 1 < nodes.size(); ++i) {
            if (nodes[i] == 1 || nodes[i] == 3 || nodes[i] == 4) ++n_story_nodes_accepted_;
        }
        n_tokens_ += static_cast<int64_t>(tokens.size());
        return {};
    }
    void end(int64_t, sequence_end) override {}
    int64_t n_story_nodes_accepted() const { return n_story_nodes_accepted_; }

private:
    std::vector<int32_t> story_;
    int32_t n_vocab_;
    int64_t n_story_nodes_accepted_ = 0;
    int64_t n_tokens_ = 0;
};

TEST(spec_trees_stories, greedy_output_through_trees_is_the_golden_and_takes_fewer_steps) {
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(golden_path, "golden/stories260K-greedy.json");
    const auto runs = testing::load_golden_runs(golden_path);
    const auto run =
        std::find_if(runs.begin(), runs.end(), [](const auto& r) { return r.model == "stories260K.gguf"; });
    ASSERT_NE(run, runs.end());
    std::vector<int32_t> story = run->prompt_ids;
    story.insert(story.end(), run->generated_ids.begin(), run->generated_ids.end());

    std::vector<int64_t> n_steps;
    for (bool speculate : {false, true}) {
        SCOPED_TRACE(speculate ? "trees" : "plain");
        auto model = testing::load_golden_model(model_path, testing::golden_setup::builtin_float);
        ASSERT_TRUE(model.ok()) << model.message();
        ASSERT_TRUE(model->runner->supports_trees());
        auto spec = std::make_shared<golden_tree_speculator>(story, model->runner->n_vocab());
        lane test_lane("test");
        engine_params params;
        params.max_running = 3;
        params.max_draft = spec->max_nodes();
        std::shared_ptr<model_runner> runner(std::move(model->runner));
        engine eng(engine_parts{runner, make_tokenizer_codec(model->tok), speculate ? spec : nullptr}, params,
                   test_lane);
        ASSERT_TRUE(eng.start().ok());
        sampling_params p;
        p.temperature = 0;
        p.max_tokens = static_cast<int32_t>(run->generated_ids.size());
        p.ignore_eos = true;
        std::vector<std::shared_ptr<testing::sink_record>> rs;
        for (int i = 0; i < 3; ++i) {
            rs.push_back(std::make_shared<testing::sink_record>());
            ASSERT_TRUE(eng.submit(request{run->prompt, p, run->prompt_ids}, testing::record_into(rs.back())).ok());
        }
        test_lane.run_until_idle();
        incremental_detokenizer detok(model->tok, false);
        std::string expected;
        for (int32_t id : run->generated_ids) expected += detok.push(id);
        expected += detok.flush();
        for (const auto& r : rs) {
            ASSERT_TRUE(r->finish.has_value()) << (r->error ? *r->error : "no ending");
            EXPECT_EQ(r->text, expected);
        }
        n_steps.push_back(eng.stats().n_steps);
        if (speculate) {
            EXPECT_GT(spec->n_story_nodes_accepted(), 3 * 20);  // most steps accept through node 1
        }
        EXPECT_TRUE(eng.stop(std::chrono::seconds(1)).ok());
    }
    // Up to three story tokens and the bonus per tree (fewer where the KV allocator grants less draft room).
    EXPECT_LT(n_steps[1] * 3, n_steps[0] * 2);
}

// A tree that the KV budget cannot hold beside every running sequence's context is refused at load, with the
// numbers and what to change; the same plugin loads with the memory to hold it.
TEST(spec_trees_stories, a_tree_too_large_for_the_kv_budget_is_refused_at_load) {
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    engine_config c = testing::golden_config(model_path, testing::golden_setup::builtin_float);
    c.plugins.spec = plugin_config("ngram");
    c.plugins.spec.params["max_draft"] = 16;
    c.scheduler.max_running_seqs = 16;
    c.kv.memory = *parse_memory_budget("256KiB");  // 1280 B per token: 204 tokens, 12 per sequence
    auto refused = load_model(c);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.message(),
              "plugins.spec: spec/ngram proposes up to 16 draft nodes per sequence, but the KV budget holds 12 "
              "tokens per running sequence (192 tokens for 16 sequences): make the tree at most half of that, raise "
              "kv.memory, or lower scheduler.max_running_seqs");
    c.kv.memory = *parse_memory_budget("4MiB");
    auto loaded = load_model(c);
    EXPECT_TRUE(loaded.ok()) << loaded.message();
}

// What `troupe serve` asks for: a spec plugin that cannot run (a drafter with another vocabulary, a tree the KV
// budget cannot hold) is reported and left out, and the model runs without it.
TEST(spec_trees_stories, with_speculation_optional_a_bad_spec_plugin_is_reported_and_left_out) {
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(other_vocab, "models/llama-2-tiny-random.gguf");
    engine_config c = testing::golden_config(model_path, testing::golden_setup::builtin_float);
    c.plugins.spec = plugin_config("draft");
    c.plugins.spec.params["model"] = other_vocab;
    auto strict = load_model(c);
    ASSERT_FALSE(strict.ok());
    auto lenient = load_model(c, load_options{.spec_optional = true});
    ASSERT_TRUE(lenient.ok()) << lenient.message();
    EXPECT_EQ(lenient->spec, nullptr);
    EXPECT_EQ(lenient->spec_error, strict.message());
    EXPECT_NE(lenient->spec_error.find("its vocabulary differs from the target's"), std::string::npos);

    c.plugins.spec = plugin_config("ngram");
    c.plugins.spec.params["max_draft"] = 16;
    c.scheduler.max_running_seqs = 16;
    c.kv.memory = *parse_memory_budget("256KiB");
    auto small = load_model(c, load_options{.spec_optional = true});
    ASSERT_TRUE(small.ok()) << small.message();
    EXPECT_EQ(small->spec, nullptr);
    EXPECT_EQ(std::count(small->plugins.begin(), small->plugins.end(), "spec/ngram"), 0);
    EXPECT_NE(small->spec_error.find("the KV budget holds 12 tokens"), std::string::npos) << small->spec_error;
}

}  // namespace
}  // namespace troupe
