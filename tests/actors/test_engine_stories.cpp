// The engine on a real model: stories260K on the CPU with the real tokenizer, through all five actors,
// against the golden greedy continuation of an independent reference. Several copies of the prompt run
// in one batch, from text and from ids, with and without drafting: every one must equal the golden.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "actors/engine/engine.h"
#include "actors/tokenizer/tokenizer_codec.h"
#include "core/gguf/gguf_file.h"
#include "core/model/cpu_llama.h"
#include "core/runtime/lane.h"
#include "core/tokenizer/incremental_detokenizer.h"
#include "core/tokenizer/tokenizer.h"
#include "kernels/ref/attention.h"
#include "tests/actors/sink_recorder.h"
#include "tests/common/fn_speculator.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

class ref_attention final : public attention_op {
public:
    std::string name() const override { return "ref"; }
    status forward(const attention_call& call, const parallel_for_fn&) override {
        ref::attention(call);
        return {};
    }
};

// The ids array named `key` in the golden run of `model` (the file is small and regular).
std::vector<int32_t> golden_ids(const std::string& json, const std::string& model, const std::string& key) {
    size_t at = json.find("\"model\": \"" + model + "\"");
    EXPECT_NE(at, std::string::npos) << model;
    at = json.find("\"" + key + "\": [", at);
    size_t end = json.find(']', at);
    std::istringstream in(json.substr(json.find('[', at) + 1, end - json.find('[', at) - 1));
    std::vector<int32_t> ids;
    for (std::string item; std::getline(in, item, ',');) ids.push_back(std::stoi(item));
    return ids;
}

// Drafts by prompt lookup: the tokens that followed the last earlier occurrence of the last token.
std::vector<int32_t> lookup_drafts(int64_t, std::span<const int32_t> context, int32_t max_draft) {
    std::vector<int32_t> out;
    for (size_t i = context.size() - 1; i-- > 0;) {
        if (context[i] != context.back()) continue;
        for (size_t j = i + 1; j < context.size() - 1 && static_cast<int32_t>(out.size()) < max_draft; ++j)
            out.push_back(context[j]);
        break;
    }
    return out;
}

// A speculator whose every proposal fails: the requests must not notice.
class failing_speculator final : public speculator {
public:
    std::string name() const override { return "test-failing"; }
    int32_t max_nodes() const override { return 4; }
    status begin(int64_t, std::span<const int32_t>) override { return {}; }
    status propose(std::span<const draft_request>, std::span<draft_tree>) override {
        return make_error("no drafts today");
    }
    status accepted(int64_t, std::span<const int32_t>, std::span<const int32_t>) override { return {}; }
    void end(int64_t, sequence_end) override {}
};

struct stories {
    std::shared_ptr<const tokenizer> tok;
    std::shared_ptr<model_runner> runner;
};

// kv_block_size 0: one block of n_ctx per sequence.
result<stories> load_stories(const std::string& path, int32_t kv_block_size = 0) {
    auto file = gguf::gguf_file::open(path);
    if (!file.ok()) return file.err();
    auto tok = tokenizer::from_gguf(**file);
    if (!tok.ok()) return tok.err();
    auto weights = bind_llama_weights(*file);
    if (!weights.ok()) return weights.err();
    cpu_llama_params params;
    params.attention = std::make_shared<ref_attention>();
    params.max_seqs = 6;
    params.n_threads = 1;
    if (kv_block_size > 0) params.kv = kv_geometry{kv_block_size, 64};
    auto runner = cpu_llama::create(std::move(*weights), params);
    if (!runner.ok()) return runner.err();
    return stories{*tok, std::shared_ptr<model_runner>(std::move(*runner))};
}

// kv.dtype f16 needs an attention op that takes F16 pools: one that takes only float32 (ref_attention, like
// a version 1 plugin) is refused when the runner is made, with a message that says what and where.
TEST(engine_stories, an_attention_op_without_f16_pools_refuses_an_f16_kv_cache) {
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    auto file = gguf::gguf_file::open(model_path);
    ASSERT_TRUE(file.ok()) << file.message();
    auto weights = bind_llama_weights(*file);
    ASSERT_TRUE(weights.ok()) << weights.message();
    cpu_llama_params params;
    params.attention = std::make_shared<ref_attention>();
    params.kv_type = kv_dtype::f16;
    auto runner = cpu_llama::create(std::move(*weights), params);
    ASSERT_FALSE(runner.ok());
    EXPECT_NE(runner.message().find("attention plugin ref does not take F16 KV pools (kv.dtype)"), std::string::npos)
        << runner.message();
}

TEST(engine_stories, batched_requests_reproduce_the_golden_greedy_continuation) {
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(golden_path, "golden/stories260K-greedy.json");
    std::ifstream in(golden_path);
    std::stringstream ss;
    ss << in.rdbuf();
    const auto prompt_ids = golden_ids(ss.str(), "stories260K.gguf", "prompt_ids");
    const auto generated = golden_ids(ss.str(), "stories260K.gguf", "generated_ids");
    ASSERT_EQ(generated.size(), 48u);

    struct case_t {
        const char* name;
        std::shared_ptr<speculator> draft;
    };
    std::vector<int64_t> n_steps;
    for (const auto& c : std::vector<case_t>{{"plain", nullptr},
                                             {"prompt-lookup drafts", testing::speculator_from(lookup_drafts)},
                                             {"a failing proposer", std::make_shared<failing_speculator>()}}) {
        SCOPED_TRACE(c.name);
        auto model = load_stories(model_path);
        ASSERT_TRUE(model.ok()) << model.message();
        incremental_detokenizer detok(model->tok, false);
        std::string expected;
        for (int32_t id : generated) expected += detok.push(id);
        expected += detok.flush();

        lane test_lane("test");
        engine_params params;
        params.max_running = 4;
        params.max_draft = 4;
        engine eng(engine_parts{model->runner, make_tokenizer_codec(model->tok), c.draft}, params, test_lane);
        ASSERT_TRUE(eng.start().ok());
        sampling_params p;
        p.temperature = 0;
        p.max_tokens = 48;
        p.ignore_eos = true;
        std::vector<std::shared_ptr<testing::sink_record>> rs;
        for (int i = 0; i < 5; ++i) {
            rs.push_back(std::make_shared<testing::sink_record>());
            std::optional<std::vector<int32_t>> ids;
            if (i % 2 == 1) ids = prompt_ids;
            ASSERT_TRUE(eng.submit(request{"Once upon a time", p, ids}, testing::record_into(rs.back())).ok());
        }
        test_lane.run_until_idle();
        for (const auto& r : rs) {
            ASSERT_TRUE(r->finish.has_value()) << (r->error ? *r->error : "no ending");
            EXPECT_EQ(r->text, expected);
            EXPECT_EQ(r->text.rfind(", there was a little girl named Lily.", 0), 0u) << r->text;
            EXPECT_EQ(r->use.n_prompt_tokens, static_cast<int32_t>(prompt_ids.size()));
            EXPECT_EQ(r->use.n_completion_tokens, 48);
        }
        auto s = eng.stats();
        n_steps.push_back(s.n_steps);
        EXPECT_EQ(s.n_draft_accepted > 0, c.draft != nullptr && c.draft->name() == "test/fn");
        EXPECT_TRUE(eng.stop(std::chrono::seconds(1)).ok());
    }
    EXPECT_LT(n_steps[1], n_steps[0]);  // accepted drafts save steps
    EXPECT_EQ(n_steps[2], n_steps[0]);
}

// Echo with logprobs: each prompt token's logprob (and top 3) is log_softmax of the model's logits at the position
// before it, as one full forward over the prompt gives them; computed in 5-token chunks, and after the same prompt
// has filled the prefix cache (a request that asks for its prompt's logprobs computes every block again).
TEST(engine_stories, prompt_logprobs_equal_log_softmax_of_a_full_forward_over_the_prompt) {
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    auto model = load_stories(model_path, /*kv_block_size=*/8);
    ASSERT_TRUE(model.ok()) << model.message();
    const std::string text = "Once upon a time, there was a little girl named Lily. She liked to play in the park.";
    const std::vector<int32_t> prompt = model->tok->encode(text, true);
    ASSERT_GT(prompt.size(), 2u * static_cast<size_t>(model->runner->kv().block_size));

    // The reference: one forward over the whole prompt on a runner of its own, every row's logits.
    auto direct = load_stories(model_path, /*kv_block_size=*/8);
    ASSERT_TRUE(direct.ok()) << direct.message();
    const int32_t bs = direct->runner->kv().block_size;
    std::vector<int32_t> table;
    for (int32_t b = 0; b * bs < static_cast<int32_t>(prompt.size()); ++b) table.push_back(b);
    forward_batch batch;
    batch.seqs.push_back(sequence_step{0, prompt, 0, table, /*all_logits=*/true});
    forward_output out;
    ASSERT_TRUE(direct->runner->forward(batch, out).ok());
    ASSERT_EQ(out.n_rows[0], static_cast<int32_t>(prompt.size()));

    lane test_lane("test");
    engine_params params;
    params.max_batched_tokens = 5;
    engine eng(engine_parts{model->runner, make_tokenizer_codec(model->tok), nullptr}, params, test_lane);
    ASSERT_TRUE(eng.start().ok());
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = 4;
    p.ignore_eos = true;
    auto warm = std::make_shared<testing::sink_record>();
    ASSERT_TRUE(eng.submit(request{"", p, prompt}, testing::record_into(warm)).ok());
    test_lane.run_until_idle();
    ASSERT_TRUE(warm->finish.has_value());

    auto rec = std::make_shared<testing::sink_record>();
    std::vector<token_logprobs> got;
    int n_calls = 0;
    request_sink sink = testing::record_into(rec);
    sink.on_prompt_logprobs = [&](const std::vector<token_logprobs>& lps) {
        got = lps;
        n_calls++;
    };
    request r{"", p, prompt, /*logprobs=*/3};
    r.prompt_logprobs = true;
    ASSERT_TRUE(eng.submit(std::move(r), std::move(sink)).ok());
    test_lane.run_until_idle();
    ASSERT_TRUE(rec->finish.has_value()) << (rec->error ? *rec->error : "no ending");
    EXPECT_EQ(rec->text, warm->text);
    EXPECT_EQ(n_calls, 1);
    ASSERT_EQ(got.size(), prompt.size());
    EXPECT_EQ(got[0].token, prompt[0]);
    EXPECT_TRUE(got[0].top.empty());
    for (size_t i = 0; i + 1 < prompt.size(); ++i) {
        auto row = out.row(0, static_cast<int32_t>(i));
        double max = row[0], sum = 0;
        for (float l : row) max = std::max(max, static_cast<double>(l));
        for (float l : row) sum += std::exp(static_cast<double>(l) - max);
        const double log_z = max + std::log(sum);
        const int32_t target = prompt[i + 1];
        const token_logprobs& lp = got[i + 1];
        EXPECT_EQ(lp.token, target) << "prompt position " << i + 1;
        EXPECT_NEAR(lp.logprob, row[static_cast<size_t>(target)] - log_z, 1e-4) << "prompt position " << i + 1;
        ASSERT_EQ(lp.top.size(), 3u);
        int32_t best = 0;
        for (int32_t t = 1; t < static_cast<int32_t>(row.size()); ++t)
            if (row[static_cast<size_t>(t)] > row[static_cast<size_t>(best)]) best = t;
        EXPECT_EQ(lp.top[0].first, best) << "prompt position " << i + 1;
        EXPECT_NEAR(lp.top[0].second, row[static_cast<size_t>(best)] - log_z, 1e-4);
    }
    EXPECT_TRUE(eng.stop(std::chrono::seconds(1)).ok());
}

}  // namespace
}  // namespace troupe
