// spec/draft on stories260K: greedy text through the engine with a drafter (its Q8_0 copy, and itself) is the
// golden continuation with drafts accepted; proposals are the drafter's argmax chain, continue from its cache after
// accepted drafts and after a rejection, and carry q rows (distributions summing to 1) at temperature > 0; a missing
// model, a path that is not a file and a drafter with another vocabulary each give one clear error.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <condition_variable>
#include <mutex>
#include <numeric>

#include "actors/engine/engine.h"
#include "actors/engine/engine_from_model.h"
#include "actors/engine/engine_params_from.h"
#include "actors/tokenizer/tokenizer_codec.h"
#include "core/loader/model_loader.h"
#include "tests/common/collected_sink.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_runs.h"

namespace troupe {
namespace {

using testing::collected;

engine_config draft_config(const std::string& target, const std::string& drafter, bool adaptive = true) {
    engine_config config;
    config.model = target;
    config.scheduler.max_running_seqs = 4;
    config.plugins.spec = plugin_config("draft");
    config.plugins.spec.params["model"] = drafter;
    config.plugins.spec.params["max_draft"] = 4;
    config.plugins.spec.params["adaptive"] = adaptive;
    return config;
}

class spec_draft : public ::testing::Test {
protected:
    void SetUp() override {
        auto model = testing::shared_file("models/stories260K.gguf");
        auto golden = testing::shared_file("golden/stories260K-greedy.json");
        if (!model || !golden) {
            if (testing::in_ci()) FAIL() << testing::missing_shared_message("models/stories260K.gguf");
            GTEST_SKIP() << testing::missing_shared_message("models/stories260K.gguf");
        }
        target_ = *model;
        run_ = testing::load_golden_runs(*golden).front();
    }
    // Submits n greedy requests for the golden run's length at once to an engine of `config` and waits for them;
    // `expected`: the golden continuation's text. Call through ASSERT_NO_FATAL_FAILURE.
    void run_greedy(const engine_config& config, int n, std::vector<std::unique_ptr<collected>>& outs,
                    std::string& expected) {
        auto m = load_model(config);
        ASSERT_TRUE(m.ok()) << m.message();
        engine_params params = engine_params_from(config);
        auto tok = m->tok;
        engine eng(engine_parts_from(*m, params), params);
        ASSERT_TRUE(eng.start().ok());
        sampling_params greedy;
        greedy.temperature = 0.0f;
        greedy.max_tokens = static_cast<int32_t>(run_.generated_ids.size());
        greedy.ignore_eos = true;
        for (int i = 0; i < n; ++i) {
            outs.push_back(std::make_unique<collected>());
            ASSERT_TRUE(eng.submit(request{run_.prompt, greedy, std::nullopt}, outs.back()->sink()).ok());
        }
        for (auto& o : outs) o->wait();
        auto detok = make_tokenizer_codec(tok)->make_decoder();
        for (int32_t id : run_.generated_ids) expected += detok->push(id);
        expected += detok->flush();
        EXPECT_TRUE(eng.stop(std::chrono::milliseconds(1000)).ok());
    }
    std::string shared(const std::string& name) {
        auto f = testing::shared_file("models/" + name);
        return f ? *f : "";
    }
    std::string target_;
    testing::golden_run run_;
};

TEST_F(spec_draft, greedy_text_with_a_drafter_is_the_golden_continuation_and_drafts_are_accepted) {
    for (const std::string drafter : {"stories260K-Q8_0.gguf", "stories260K.gguf"}) {
        SCOPED_TRACE(drafter);
        ASSERT_FALSE(shared(drafter).empty()) << testing::missing_shared_message("models/" + drafter);
        std::vector<std::unique_ptr<collected>> outs;
        std::string expected;
        // Three at once: the drafter runs them batched.
        ASSERT_NO_FATAL_FAILURE(run_greedy(draft_config(target_, shared(drafter)), 3, outs, expected));
        for (auto& o : outs) {
            EXPECT_EQ(o->error, "");
            EXPECT_EQ(o->text, expected);
            EXPECT_GT(o->use.n_draft_tokens, 0);
            EXPECT_GT(o->use.n_draft_accepted, 0);
            if (drafter == "stories260K.gguf") {  // the target as its own drafter: (nearly) every draft holds
                EXPECT_GE(o->use.n_draft_accepted * 10, o->use.n_draft_tokens * 9)
                    << o->use.n_draft_accepted << " of " << o->use.n_draft_tokens;
            }
        }
    }
}

// Calls the loaded speculator directly, as the executor does: one sequence in blocks [first, first + 8).
struct direct {
    loaded_model m;
    std::vector<int32_t> table;
    draft_tree propose(int64_t seq, const std::vector<int32_t>& tokens, float temperature, int32_t n_new = 1) {
        draft_request r;
        r.seq_id = seq;
        r.tokens = tokens;
        r.n_new = n_new;
        r.max_nodes = 4;
        r.max_depth = 4;
        r.temperature = temperature;
        r.block_table = table;
        r.block_size = m.runner->kv().block_size;
        draft_tree tree;
        status st = m.spec->propose(std::span<const draft_request>(&r, 1), std::span<draft_tree>(&tree, 1));
        EXPECT_TRUE(st.ok()) << st.message();
        return tree;
    }
};

TEST_F(spec_draft, proposals_are_the_drafters_argmax_chain_and_continue_from_its_cache) {
    auto m = load_model(draft_config(target_, target_, false));
    ASSERT_TRUE(m.ok()) << m.message();
    direct d{std::move(*m), {}};
    const int32_t bs = d.m.runner->kv().block_size;
    const int32_t blocks = (static_cast<int32_t>(run_.prompt_ids.size() + run_.generated_ids.size()) + bs) / bs + 1;
    for (int32_t b = 0; b < blocks; ++b) d.table.push_back(b);
    const std::vector<int32_t>& gen = run_.generated_ids;
    std::vector<int32_t> context = run_.prompt_ids;
    ASSERT_TRUE(d.m.spec->begin(1, context).ok());
    draft_tree t = d.propose(1, context, 0.0f, static_cast<int32_t>(context.size()));
    EXPECT_TRUE(t.q.empty());  // greedy: deterministic drafts
    EXPECT_EQ(t.parents, (std::vector<int32_t>{-1, 0, 1, 2}));
    EXPECT_EQ(t.tokens, std::vector<int32_t>(gen.begin(), gen.begin() + 4));  // the model is its own drafter

    // Two drafts accepted, then the target's own token: the drafter goes on from the rows it has.
    const std::vector<int32_t> nodes = {0, 1, -1};
    ASSERT_TRUE(d.m.spec->accepted(1, std::vector<int32_t>(gen.begin(), gen.begin() + 3), nodes).ok());
    context.insert(context.end(), gen.begin(), gen.begin() + 3);
    t = d.propose(1, context, 0.0f);
    EXPECT_EQ(t.tokens, std::vector<int32_t>(gen.begin() + 3, gen.begin() + 7));

    // Every draft rejected and another token taken: the rows past it are stale and rewritten; the proposal equals a
    // fresh sequence's on the same context.
    const int32_t other = (gen[3] + 1) % 512;
    ASSERT_TRUE(d.m.spec->accepted(1, std::vector<int32_t>{other}, std::vector<int32_t>{-1}).ok());
    context.push_back(other);
    const draft_tree after_rejection = d.propose(1, context, 0.0f);
    d.m.spec->end(1, sequence_end::finished);
    ASSERT_TRUE(d.m.spec->begin(2, context).ok());
    const draft_tree fresh = d.propose(2, context, 0.0f, static_cast<int32_t>(context.size()));
    EXPECT_EQ(after_rejection.tokens, fresh.tokens);
    EXPECT_EQ(after_rejection.tokens.size(), 4u);
}

TEST_F(spec_draft, sampled_proposals_carry_q_rows_that_are_distributions_holding_their_tokens) {
    auto m = load_model(draft_config(target_, shared("stories260K-Q8_0.gguf"), false));
    ASSERT_TRUE(m.ok()) << m.message();
    direct d{std::move(*m), {0, 1, 2, 3, 4, 5, 6, 7}};
    ASSERT_TRUE(d.m.spec->begin(1, run_.prompt_ids).ok());
    const draft_tree t = d.propose(1, run_.prompt_ids, 0.8f, static_cast<int32_t>(run_.prompt_ids.size()));
    ASSERT_EQ(t.size(), 4u);
    const size_t n_vocab = 512;
    ASSERT_EQ(t.q.size(), t.size() * n_vocab);
    for (size_t i = 0; i < t.size(); ++i) {
        const float* row = t.q.data() + i * n_vocab;
        const double sum = std::accumulate(row, row + n_vocab, 0.0);
        EXPECT_NEAR(sum, 1.0, 1e-4) << "row " << i;
        EXPECT_TRUE(std::all_of(row, row + n_vocab, [](float x) { return x >= 0; }));
        EXPECT_GT(row[t.tokens[i]], 0.0f) << "node " << i << " drew a token its q row gives no mass";
    }
}

TEST_F(spec_draft, with_branch_the_first_draft_gets_sibling_roots_and_greedy_text_stays_the_golden) {
    engine_config config = draft_config(target_, shared("stories260K-Q4_0.gguf"), false);
    config.plugins.spec.params["branch"] = 3;
    {
        auto m = load_model(config);
        ASSERT_TRUE(m.ok()) << m.message();
        EXPECT_EQ(m->spec->max_nodes(), 6);  // a chain of 4 and 2 sibling roots
        direct d{std::move(*m), {0, 1, 2, 3, 4, 5, 6, 7}};
        ASSERT_TRUE(d.m.spec->begin(1, run_.prompt_ids).ok());
        draft_tree t = d.propose(1, run_.prompt_ids, 0.0f, static_cast<int32_t>(run_.prompt_ids.size()));
        // 4 nodes asked: a chain of 2 and the 2 sibling roots (the next best tokens), leaves after the chain.
        EXPECT_EQ(t.parents, (std::vector<int32_t>{-1, 0, -1, -1}));
        ASSERT_EQ(t.tokens.size(), 4u);
        EXPECT_NE(t.tokens[2], t.tokens[0]);
        EXPECT_NE(t.tokens[3], t.tokens[0]);
        EXPECT_NE(t.tokens[3], t.tokens[2]);
        ASSERT_TRUE(d.m.spec->begin(2, run_.prompt_ids).ok());
        d.table = {8, 9, 10, 11, 12, 13, 14, 15};
        t = d.propose(2, run_.prompt_ids, 0.7f, static_cast<int32_t>(run_.prompt_ids.size()));
        ASSERT_EQ(t.size(), 4u);
        ASSERT_EQ(t.q.size(), 4u * 512);
        // Siblings are independent draws from the first draft's distribution: the same q row.
        EXPECT_TRUE(std::equal(t.q.begin(), t.q.begin() + 512, t.q.begin() + 2 * 512));
        EXPECT_TRUE(std::equal(t.q.begin(), t.q.begin() + 512, t.q.begin() + 3 * 512));
    }
    std::vector<std::unique_ptr<collected>> outs;
    std::string expected;
    ASSERT_NO_FATAL_FAILURE(run_greedy(config, 1, outs, expected));
    const collected& out = *outs.front();
    EXPECT_EQ(out.error, "");
    EXPECT_EQ(out.text, expected);
    EXPECT_GT(out.use.n_draft_accepted, 0);
}

TEST_F(spec_draft, a_missing_model_a_path_that_is_not_a_file_and_another_vocabulary_each_give_one_clear_error) {
    engine_config missing = draft_config(target_, "");
    missing.plugins.spec.params.remove("model");
    auto r = load_model(missing);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(),
              "plugin spec/draft: params.model: the drafter's GGUF file is required (plugins: {spec: {name: draft, "
              "params: {model: PATH}}})");

    r = load_model(draft_config(target_, "/nonexistent/draft.gguf"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(),
              "plugin spec/draft: params.model: '/nonexistent/draft.gguf' is not a file (the drafter's "
              "GGUF file)");

    const std::string other = shared("llama-2-tiny-random.gguf");
    ASSERT_FALSE(other.empty()) << testing::missing_shared_message("models/llama-2-tiny-random.gguf");
    r = load_model(draft_config(target_, other));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(), "plugin spec/draft: params.model: " + other +
                               ": its vocabulary differs from the target's (" + target_ +
                               "): n_vocab 32000 vs 512; a drafter must use the target's tokenizer");
}

}  // namespace
}  // namespace troupe
