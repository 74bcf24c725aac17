// The whole path a request takes — tokenizer, scheduler, KV allocator, executor, streamer actors —
// with the real stories260K model and the default plugins: the streamed text equals the golden
// continuation; with the ngram speculation plugin it is identical (drafts are verified exactly); a
// seeded sampled request gives the same text alone and alongside other requests.
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <condition_variable>
#include <mutex>

#include "actors/engine/engine.h"
#include "actors/executor/draft_adapter.h"
#include "actors/tokenizer/tokenizer_codec.h"
#include "core/loader/model_loader.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_runs.h"

namespace troupe {
namespace {

// Collects one request's output; wait() blocks until it ended.
struct collected {
    std::mutex mutex;
    std::condition_variable cv;
    std::string text;
    std::string error;
    bool ended = false;
    usage use;

    request_sink sink() {
        request_sink s;
        s.on_text = [this](std::string_view d) {
            std::lock_guard lock(mutex);
            text += d;
        };
        s.on_done = [this](finish_reason, const usage& u, const timings&) {
            std::lock_guard lock(mutex);
            use = u;
            ended = true;
            cv.notify_all();
        };
        s.on_error = [this](const std::string& m) {
            std::lock_guard lock(mutex);
            error = m;
            ended = true;
            cv.notify_all();
        };
        return s;
    }
    void wait() {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return ended; });
    }
};

struct running_engine {
    loaded_model model;
    std::unique_ptr<engine> eng;
};

result<running_engine> start_engine(const std::string& model_path, const std::string& spec) {
    engine_config config;
    config.model = model_path;
    config.scheduler.max_running_seqs = 4;
    if (!spec.empty()) {
        config.plugins.spec = plugin_config(spec);
        config.plugins.spec.params["max_draft"] = 4;
    }
    auto m = load_model(config);
    if (!m.ok()) return m.err();
    running_engine r;
    engine_params params;
    params.max_running = 4;
    engine_parts parts{std::shared_ptr<model_runner>(std::move(m->runner)), make_tokenizer_codec(m->tok), {}};
    if (m->spec) {
        parts.draft = draft_fn_from(m->spec);
        params.max_draft = max_draft_request;
    }
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
    auto r = start_engine(model_path_, "ngram");
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

}  // namespace
}  // namespace troupe
