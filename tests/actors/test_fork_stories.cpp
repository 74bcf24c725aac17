// Parallel sampling through forks on a real model (stories260K on the CPU, its tokenizer, all five actors): the
// choices of one prompt forked from one sequence give what the same choices give as independent requests (the path
// before forks), greedy and seeded; the prompt is computed once, and the shared partial block's copy carries its rows.
#include <gtest/gtest.h>

#include <algorithm>

#include "actors/engine/engine.h"
#include "actors/tokenizer/tokenizer_codec.h"
#include "core/gguf/gguf_file.h"
#include "core/model/cpu_llama.h"
#include "core/runtime/lane.h"
#include "core/tokenizer/tokenizer.h"
#include "kernels/ref/attention.h"
#include "tests/actors/sink_recorder.h"
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

// The model with copy_blocks answering success without copying: the negative control, where a forked choice that
// copies the shared partial block reads rows that were never written there.
class copyless_runner final : public model_runner {
public:
    explicit copyless_runner(std::shared_ptr<model_runner> inner) : inner_(std::move(inner)) {}
    std::string description() const override { return inner_->description(); }
    int32_t n_vocab() const override { return inner_->n_vocab(); }
    int32_t n_ctx() const override { return inner_->n_ctx(); }
    kv_geometry kv() const override { return inner_->kv(); }
    size_t kv_bytes_per_token() const override { return inner_->kv_bytes_per_token(); }
    status forward(const forward_batch& batch, forward_output& out) override { return inner_->forward(batch, out); }
    status copy_blocks(std::span<const int32_t>, std::span<const int32_t>) override { return {}; }

private:
    std::shared_ptr<model_runner> inner_;
};

struct outcome {
    std::vector<std::string> texts;
    int64_t n_prefill_tokens = 0;
    int64_t n_forks = 0;
    int32_t n_prompt = 0;
};

// n choices of `prompt` on a fresh engine (blocks of 8 tokens), forked or as independent requests; choice j samples
// with seed + j.
outcome run_choices(const std::string& model_path, const std::string& prompt, int n, sampling_params p, bool fork,
                    bool copies = true) {
    outcome o;
    auto file = gguf::gguf_file::open(model_path);
    EXPECT_TRUE(file.ok()) << file.message();
    auto tok = tokenizer::from_gguf(**file);
    EXPECT_TRUE(tok.ok()) << tok.message();
    auto weights = bind_llama_weights(*file);
    EXPECT_TRUE(weights.ok()) << weights.message();
    cpu_llama_params params;
    params.attention = std::make_shared<ref_attention>();
    params.n_threads = 1;
    params.kv = kv_geometry{8, 64};
    auto runner = cpu_llama::create(std::move(*weights), params);
    EXPECT_TRUE(runner.ok()) << runner.message();
    if (!runner.ok()) return o;
    lane test_lane("test");
    std::shared_ptr<model_runner> model(std::move(*runner));
    if (!copies) model = std::make_shared<copyless_runner>(model);
    engine eng(engine_parts{model, make_tokenizer_codec(*tok), nullptr}, engine_params{}, test_lane);
    EXPECT_TRUE(eng.start().ok());
    std::vector<std::shared_ptr<testing::sink_record>> rs;
    request_id first = 0;
    for (int j = 0; j < n; ++j) {
        request r{prompt, p, std::nullopt};
        r.sampling.seed = p.seed + static_cast<uint64_t>(j);
        if (fork) {
            r.n_forks = j == 0 ? n - 1 : 0;
            r.fork_of = first;
        }
        rs.push_back(std::make_shared<testing::sink_record>());
        auto id = eng.submit(std::move(r), testing::record_into(rs.back()));
        EXPECT_TRUE(id.ok()) << id.message();
        if (j == 0 && id.ok()) first = *id;
    }
    test_lane.run_until_idle();
    for (const auto& r : rs) {
        EXPECT_TRUE(r->finish.has_value()) << (r->error ? *r->error : "no ending");
        o.texts.push_back(r->text);
        o.n_prompt = r->use.n_prompt_tokens;
    }
    const engine_snapshot snap = eng.snapshot();
    o.n_prefill_tokens = snap.steps.n_prefill_tokens;
    o.n_forks = snap.steps.n_forks;
    EXPECT_TRUE(eng.stop(std::chrono::seconds(1)).ok());
    return o;
}

// 27 tokens with BOS: three whole blocks of 8 and a partial fourth of 3 rows that the choices share, then copy.
const char* k_prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in";

TEST(fork_stories, greedy_choices_forked_from_one_prompt_are_equal_to_each_other_and_to_independent_requests) {
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = 24;
    p.ignore_eos = true;
    const outcome forked = run_choices(model_path, k_prompt, 2, p, true);
    const outcome alone = run_choices(model_path, k_prompt, 2, p, false);
    ASSERT_EQ(forked.texts.size(), 2u);
    EXPECT_FALSE(forked.texts[0].empty());
    EXPECT_EQ(forked.texts[0], forked.texts[1]);
    EXPECT_EQ(forked.texts, alone.texts);
    EXPECT_EQ(forked.n_forks, 1);
    EXPECT_EQ(alone.n_forks, 0);
    // The prompt once; of independent requests the second computes at least its last, partial block again.
    EXPECT_EQ(forked.n_prefill_tokens, forked.n_prompt);
    EXPECT_EQ(forked.n_prompt, 27);
    EXPECT_EQ(alone.n_prefill_tokens, forked.n_prompt + 3);  // the second computes the partial block's 3 rows
    // The copy of the shared partial block is what carries its rows: without it a choice reads unwritten rows.
    const outcome copyless = run_choices(model_path, k_prompt, 2, p, true, /*copies=*/false);
    EXPECT_EQ(copyless.n_forks, 1);
    EXPECT_NE(copyless.texts, alone.texts);
}

TEST(fork_stories, seeded_choices_forked_from_one_prompt_reproduce_the_independent_requests_with_their_seeds) {
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    sampling_params p;
    p.temperature = 1.0f;
    p.top_p = 0.95f;
    p.seed = 42;
    p.max_tokens = 32;
    p.ignore_eos = true;
    const outcome forked = run_choices(model_path, k_prompt, 4, p, true);
    const outcome again = run_choices(model_path, k_prompt, 4, p, true);
    const outcome alone = run_choices(model_path, k_prompt, 4, p, false);
    ASSERT_EQ(forked.texts.size(), 4u);
    EXPECT_EQ(forked.texts, again.texts);  // reproducible
    EXPECT_EQ(forked.texts, alone.texts);  // each choice's own seed stream, as before forks
    // Different seeds draw different stories (4 equal ones would mean the choices share a sampler).
    std::vector<std::string> distinct = forked.texts;
    std::sort(distinct.begin(), distinct.end());
    EXPECT_GT(std::unique(distinct.begin(), distinct.end()) - distinct.begin(), 1);
    EXPECT_EQ(forked.n_forks, 3);
    EXPECT_EQ(forked.n_prefill_tokens, forked.n_prompt);
    EXPECT_GT(alone.n_prefill_tokens, alone.n_prompt);
}

}  // namespace
}  // namespace troupe
