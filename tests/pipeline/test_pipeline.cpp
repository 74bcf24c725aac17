// The whole path a request takes — tokenizer, scheduler, KV allocator, executor, streamer actors —
// with the real stories260K model and the default plugins: the streamed text equals the golden
// continuation; with the ngram speculation plugin it is identical (drafts are verified exactly); a
// seeded sampled request gives the same text alone and alongside other requests.
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <condition_variable>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

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

struct running_engine {
    loaded_model model;
    std::unique_ptr<engine> eng;
};

result<running_engine> start_engine(const std::string& model_path, const std::string& spec,
                                    const std::function<void(engine_config&)>& adjust = {}) {
    engine_config config;
    config.model = model_path;
    config.scheduler.max_running_seqs = 4;
    if (!spec.empty()) {
        config.plugins.spec = plugin_config(spec);
        config.plugins.spec.params["max_draft"] = 4;
    }
    if (adjust) adjust(config);
    auto m = load_model(config);
    if (!m.ok()) return m.err();
    running_engine r;
    engine_params params = engine_params_from(config);
    engine_parts parts = engine_parts_from(*m, params);
    r.model = std::move(*m);
    r.eng = std::make_unique<engine>(std::move(parts), params);
    if (status st = r.eng->start(); !st.ok()) return st.err();
    return r;
}

sampling_params greedy(int32_t n) {
    sampling_params p;
    p.temperature = 0.0f;
    p.max_tokens = n;
    return p;
}

class pipeline : public ::testing::Test {
protected:
    void SetUp() override {
        auto model = testing::shared_file("models/stories260K.gguf");
        auto golden = testing::shared_file("golden/stories260K-greedy.json");
        if (!model || !golden) {
            if (testing::in_ci()) FAIL() << testing::missing_shared_message("models/stories260K.gguf");
            GTEST_SKIP() << testing::missing_shared_message("models/stories260K.gguf");
        }
        model_path_ = *model;
        run_ = testing::load_golden_runs(*golden).front();
    }
    std::string model_path_;
    testing::golden_run run_;
};

std::string golden_text(const loaded_model& m, const testing::golden_run& run) {
    std::string text;
    auto detok = make_tokenizer_codec(m.tok)->make_decoder();
    for (int32_t id : run.generated_ids) text += detok->push(id);
    return text + detok->flush();
}

TEST_F(pipeline, streamed_greedy_text_equals_the_golden_continuation) {
    auto r = start_engine(model_path_, "");
    ASSERT_TRUE(r.ok()) << r.message();
    collected out;
    ASSERT_TRUE(r->eng->submit(request{run_.prompt, greedy(48), std::nullopt}, out.sink()).ok());
    out.wait();
    EXPECT_EQ(out.error, "");
    EXPECT_EQ(out.text, golden_text(r->model, run_));
    EXPECT_EQ(out.use.n_prompt_tokens, static_cast<int32_t>(run_.prompt_ids.size()));
    EXPECT_EQ(out.use.n_completion_tokens, 48);
    EXPECT_TRUE(r->eng->stop(std::chrono::milliseconds(1000)).ok());
}

TEST_F(pipeline, ngram_speculation_leaves_greedy_text_unchanged_and_accepts_drafts) {
    // Drafting on every step: the adaptive controller times steps, and on a loaded machine (a CI run beside other
    // jobs) it turned drafting off after the first window, before the story repeats, so no draft was accepted.
    auto r = start_engine(model_path_, "ngram", [](engine_config& c) { c.scheduler.adaptive_draft = false; });
    ASSERT_TRUE(r.ok()) << r.message();
    collected out;
    ASSERT_TRUE(r->eng->submit(request{run_.prompt, greedy(48), std::nullopt}, out.sink()).ok());
    out.wait();
    EXPECT_EQ(out.error, "");
    EXPECT_EQ(out.text, golden_text(r->model, run_));
    // The story repeats itself ("Lily", "ball"), so prompt lookup proposes and some drafts hold.
    EXPECT_GT(out.use.n_draft_tokens, 0);
    EXPECT_GT(out.use.n_draft_accepted, 0);
    EXPECT_TRUE(r->eng->stop(std::chrono::milliseconds(1000)).ok());
}

TEST_F(pipeline, a_seeded_request_gives_the_same_text_alone_and_in_a_batch) {
    auto r = start_engine(model_path_, "");
    ASSERT_TRUE(r.ok()) << r.message();
    sampling_params seeded;
    seeded.temperature = 0.9f;
    seeded.seed = 42;
    seeded.max_tokens = 40;
    collected alone;
    ASSERT_TRUE(r->eng->submit(request{"Once upon a time", seeded, std::nullopt}, alone.sink()).ok());
    alone.wait();

    collected again, other1, other2;
    sampling_params other = seeded;
    other.seed = 7;
    ASSERT_TRUE(r->eng->submit(request{"The dog ran to the park", other, std::nullopt}, other1.sink()).ok());
    ASSERT_TRUE(r->eng->submit(request{"Once upon a time", seeded, std::nullopt}, again.sink()).ok());
    ASSERT_TRUE(r->eng->submit(request{"Tom had a red boat", greedy(30), std::nullopt}, other2.sink()).ok());
    again.wait();
    other1.wait();
    other2.wait();
    EXPECT_FALSE(alone.text.empty());
    EXPECT_EQ(again.text, alone.text);
    EXPECT_TRUE(r->eng->stop(std::chrono::milliseconds(1000)).ok());
}

TEST_F(pipeline, sixteen_concurrent_greedy_requests_of_one_prompt_all_give_the_golden_text_sharing_its_blocks) {
    auto r = start_engine(model_path_, "", [](engine_config& c) {
        c.scheduler.max_running_seqs = 16;
        c.kv.block_size = 4;  // the golden prompt spans whole blocks that the requests share
    });
    ASSERT_TRUE(r.ok()) << r.message();
    std::vector<std::unique_ptr<collected>> outs;
    for (int i = 0; i < 16; ++i) {
        outs.push_back(std::make_unique<collected>());
        ASSERT_TRUE(r->eng->submit(request{run_.prompt, greedy(48), std::nullopt}, outs.back()->sink()).ok());
    }
    const std::string golden = golden_text(r->model, run_);
    for (auto& o : outs) {
        o->wait();
        EXPECT_EQ(o->error, "");
        EXPECT_EQ(o->text, golden);
    }
    // Blocks go back to the KV allocator by message after a request's last token: wait (bounded) for
    // the frees to land before reading the pool.
    engine_snapshot snap = r->eng->snapshot();
    for (int i = 0; i < 200 && snap.kv.n_used != 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        snap = r->eng->snapshot();
    }
    const auto n_blocks = static_cast<int64_t>((run_.prompt_ids.size() - 1) / 4);
    ASSERT_GT(n_blocks, 0);
    EXPECT_EQ(snap.kv.n_prefix_queries, 16 * n_blocks);
    EXPECT_EQ(snap.kv.n_prefix_hits, 15 * n_blocks);  // all but the first request's
    EXPECT_GT(snap.kv.prefix_hit_rate, 0.9);
    EXPECT_EQ(snap.n_completed, 16);
    EXPECT_EQ(snap.ttft_ms.n, 16);
    EXPECT_GT(snap.steps.n_steps, 0);
    EXPECT_EQ(snap.kv.n_used, 0);  // every block back; the prompt's blocks stay cached
    EXPECT_GT(snap.kv.n_cached, 0);
    EXPECT_TRUE(r->eng->stop(std::chrono::milliseconds(1000)).ok());
}

TEST_F(pipeline, a_long_prompt_is_prefilled_in_chunks_while_the_running_streams_keep_decoding) {
    auto text = testing::shared_file("text/stories.txt");
    if (!text) GTEST_SKIP() << testing::missing_shared_message("text/stories.txt");
    std::ifstream in(*text);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string long_prompt = ss.str().substr(0, 1400);  // about 350 tokens

    constexpr int32_t k_budget = 32;
    auto r = start_engine(model_path_, "", [](engine_config& c) {
        c.scheduler.max_batched_tokens = k_budget;
        c.kv.prefix_caching = false;  // else the second long prompt is served from the first one's blocks
    });
    ASSERT_TRUE(r.ok()) << r.message();
    // The long prompt alone (with the same chunking) gives the reference text.
    collected alone;
    ASSERT_TRUE(r->eng->submit(request{long_prompt, greedy(8), std::nullopt}, alone.sink()).ok());
    alone.wait();
    ASSERT_EQ(alone.error, "");
    const int32_t n_long = alone.use.n_prompt_tokens;
    ASSERT_GT(n_long, 8 * k_budget);

    std::vector<std::unique_ptr<collected>> shorts;
    for (const char* p : {"Once upon a time", "The dog ran to the park", "Tom had a red boat"}) {
        shorts.push_back(std::make_unique<collected>());
        sampling_params g = greedy(120);
        g.ignore_eos = true;
        ASSERT_TRUE(r->eng->submit(request{p, g, std::nullopt}, shorts.back()->sink()).ok());
    }
    for (auto& s : shorts) {  // all three are decoding
        while (true) {
            std::lock_guard lock(s->mutex);
            if (!s->delta_times.empty()) break;
        }
    }
    collected long_one;
    const auto t_long = steady_clock::now();
    ASSERT_TRUE(r->eng->submit(request{long_prompt, greedy(8), std::nullopt}, long_one.sink()).ok());
    long_one.wait();
    for (auto& s : shorts) s->wait();
    EXPECT_EQ(long_one.text, alone.text);  // chunked alongside others = chunked alone
    ASSERT_FALSE(long_one.delta_times.empty());
    const auto t_first = long_one.delta_times.front();
    // While the long prompt was prefilled (at most 29 tokens a step), every running stream
    // kept receiving tokens: one per step.
    for (auto& s : shorts) {
        int n_during = 0;
        for (auto t : s->delta_times) n_during += t > t_long && t < t_first ? 1 : 0;
        EXPECT_GE(n_during, (n_long / k_budget) - 3) << "a running stream stalled during the long prefill";
    }
    EXPECT_TRUE(r->eng->stop(std::chrono::milliseconds(1000)).ok());
}

// A KV plugin through the whole path: requests that share a cached prompt prefix (new sequences starting after
// whole cached blocks, each with a fresh window slot), drafts verified and rolled back (ngram), sixteen at once;
// each gives the text the same prompt gives alone.
TEST_F(pipeline, with_a_kv_plugin_prefix_sharing_and_speculation_give_the_text_of_one_request_alone) {
    for (const char* plugin : {"int8", "kivi", "fp8"}) {
        SCOPED_TRACE(plugin);
        auto r = start_engine(model_path_, "ngram", [plugin](engine_config& c) {
            c.scheduler.max_running_seqs = 16;
            c.kv.block_size = 4;
            c.kv.plugin = plugin_config(plugin);
        });
        ASSERT_TRUE(r.ok()) << r.message();
        collected alone;
        ASSERT_TRUE(r->eng->submit(request{run_.prompt, greedy(48), std::nullopt}, alone.sink()).ok());
        alone.wait();
        ASSERT_EQ(alone.error, "");
        std::vector<std::unique_ptr<collected>> outs;
        for (int i = 0; i < 16; ++i) {
            outs.push_back(std::make_unique<collected>());
            ASSERT_TRUE(r->eng->submit(request{run_.prompt, greedy(48), std::nullopt}, outs.back()->sink()).ok());
        }
        for (auto& o : outs) {
            o->wait();
            EXPECT_EQ(o->error, "");
            EXPECT_EQ(o->text, alone.text);
        }
        const engine_snapshot snap = r->eng->snapshot();
        EXPECT_GT(snap.kv.n_prefix_hits, 0);
        EXPECT_TRUE(r->eng->stop(std::chrono::milliseconds(1000)).ok());
    }
}

}  // namespace
}  // namespace troupe
