// Sliding-window KV release end to end: ../shared/models/arch/tiny-gemma2.gguf (26 layers, the even ones attend
// within a window of 4) loaded as `troupe run` / `troupe serve` load it (load_options::kv_groups, kv.window_release)
// has two KV groups, global and windowed, and runs through the engine's five actors with 2-token blocks, so the
// windowed layers' blocks go back to the pool every other token. Its 48 greedy ids (prompt + 48 is far past the
// window) equal arch-greedy.json's, for a first request and for two after it that share its prompt's blocks in both
// groups from the prefix cache (the windowed ones left the window, went back to the pool and were still cached); two
// requests at once generating 200 tokens give the same ids as the same engine with kv.window_release off. The runner
// refuses a step whose windowed table has a released entry inside the window.
#include <gtest/gtest.h>

#include "actors/engine/engine.h"
#include "actors/engine/engine_from_model.h"
#include "actors/engine/engine_params_from.h"
#include "core/loader/model_loader.h"
#include "core/model/cpu_llama.h"
#include "core/runtime/lane.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"
#include "tests/golden/golden_runs.h"

namespace troupe {
namespace {

using testing::golden_setup;

engine_config gemma2_config(const std::string& path, golden_setup setup, bool release) {
    engine_config c = testing::golden_config(path, setup);
    c.kv.block_size = 2;
    c.kv.window_release = release;
    c.scheduler.max_batched_tokens = 4;  // the 5-token prompt in two chunks
    return c;
}

struct generated {
    std::vector<std::vector<int32_t>> ids;  // per request
    std::vector<int32_t> kv_windows;
    int64_t n_prefix_hits = 0;
};

// n_requests greedy requests of prompt_ids through the engine, n_tokens each; staggered: the first runs to its end
// before the others are submitted.
result<generated> generate(const engine_config& config, const std::vector<int32_t>& prompt_ids, int32_t n_tokens,
                           int n_requests, bool staggered) {
    auto model = load_model(config, load_options{.kv_groups = true});
    if (!model.ok()) return model.err();
    generated out;
    out.kv_windows = model->runner->kv_group_windows();
    engine_params params = engine_params_from(config);
    engine_parts parts = engine_parts_from(*model, params);
    lane test_lane("test");
    engine eng(std::move(parts), params, test_lane);
    if (status st = eng.start(); !st.ok()) return st.err();
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = n_tokens;
    p.ignore_eos = true;
    out.ids.resize(static_cast<size_t>(n_requests));
    std::vector<std::string> errors(static_cast<size_t>(n_requests));
    for (int i = 0; i < n_requests; ++i) {
        request_sink s;
        s.on_logprobs = [&out, i](const token_logprobs& lp) { out.ids[i].push_back(lp.token); };
        s.on_error = [&errors, i](const std::string& m) { errors[i] = m; };
        request r{"", p, prompt_ids};
        r.logprobs = 0;
        if (auto id = eng.submit(std::move(r), std::move(s)); !id.ok()) return id.err();
        if (staggered && i == 0) test_lane.run_until_idle();
    }
    test_lane.run_until_idle();
    for (const std::string& e : errors) {
        if (!e.empty()) return make_error(e);
    }
    out.n_prefix_hits = eng.snapshot().kv.n_prefix_hits;
    if (status st = eng.stop(std::chrono::seconds(1)); !st.ok()) return st.err();
    return out;
}

class window_release : public ::testing::TestWithParam<golden_setup> {};

TEST_P(window_release, tiny_gemma2_gives_the_golden_ids_with_its_windowed_layers_blocks_released) {
    TROUPE_REQUIRE_SHARED(golden_path, "golden/arch-greedy.json");
    TROUPE_REQUIRE_SHARED(model_path, "models/arch/tiny-gemma2.gguf");
    std::optional<testing::golden_run> run;
    for (const auto& r : testing::load_golden_runs(golden_path)) {
        if (r.model == "tiny-gemma2.gguf") run = r;
    }
    ASSERT_TRUE(run.has_value());
    const auto n = static_cast<int32_t>(run->generated_ids.size());
    ASSERT_GT(static_cast<int32_t>(run->prompt_ids.size()) + n, 4 * 4);  // many windows long

    // Without planning ahead each grant knows what the last step computed, so the prompt's windowed blocks are
    // ready (cached) when they leave the window; planned ahead they leave it while still being computed and are
    // dropped from the cache (kv_group_pool.h).
    engine_config c = gemma2_config(model_path, GetParam(), true);
    c.scheduler.plan_ahead = false;
    auto got = generate(c, run->prompt_ids, n, 3, /*staggered=*/true);
    ASSERT_TRUE(got.ok()) << got.message();
    EXPECT_EQ(got->kv_windows, (std::vector<int32_t>{0, 4}));  // global group, windowed group
    for (const auto& ids : got->ids) EXPECT_EQ(ids, run->generated_ids);
    // The later two shared the first one's 2 whole prompt blocks, in each group (the pool counts every table's).
    EXPECT_EQ(got->n_prefix_hits, 2 * 2 * 2);
}

INSTANTIATE_TEST_SUITE_P(recipes, window_release,
                         ::testing::Values(golden_setup::builtin_quantized, golden_setup::builtin_float),
                         [](const auto& info) { return std::string(testing::setup_name(info.param)); });

TEST(window_release, a_long_generation_gives_the_same_ids_as_with_the_release_off) {
    TROUPE_REQUIRE_SHARED(golden_path, "golden/arch-greedy.json");
    TROUPE_REQUIRE_SHARED(model_path, "models/arch/tiny-gemma2.gguf");
    std::vector<int32_t> prompt;
    for (const auto& r : testing::load_golden_runs(golden_path)) {
        if (r.model == "tiny-gemma2.gguf") prompt = r.prompt_ids;
    }
    ASSERT_FALSE(prompt.empty());
    // Both runs make the same steps: two sequences side by side, their windowed blocks taken and given back in turn.
    // (The prefix cache is off in both: with it the release changes which prompt blocks hit and so the batches,
    // whose float sums differ in their last bits; by token ~150 that flips an argmax of this random model.)
    const int32_t n = 200;
    engine_config c = gemma2_config(model_path, golden_setup::builtin_quantized, true);
    c.kv.prefix_caching = false;
    auto on = generate(c, prompt, n, 2, /*staggered=*/false);
    ASSERT_TRUE(on.ok()) << on.message();
    c.kv.window_release = false;
    auto off = generate(c, prompt, n, 2, /*staggered=*/false);
    ASSERT_TRUE(off.ok()) << off.message();
    EXPECT_EQ(on->kv_windows, (std::vector<int32_t>{0, 4}));
    EXPECT_EQ(off->kv_windows, (std::vector<int32_t>{0}));
    ASSERT_EQ(on->ids.size(), 2u);
    EXPECT_EQ(on->ids[0].size(), static_cast<size_t>(n));
    EXPECT_EQ(on->ids, off->ids);
    for (size_t r = 0; r < on->ids.size(); ++r) {
        const auto& x = on->ids[r];
        const auto& y = off->ids[r];
        const auto d = std::mismatch(x.begin(), x.end(), y.begin(), y.end());
        if (d.first != x.end()) ADD_FAILURE() << "request " << r << " parts at token " << (d.first - x.begin());
        const auto e = std::mismatch(x.begin(), x.end(), on->ids[0].begin(), on->ids[0].end());
        const auto f = std::mismatch(y.begin(), y.end(), off->ids[0].begin(), off->ids[0].end());
        std::printf("request %zu vs 0: on parts at %d, off at %d\n", r, int(e.first - x.begin()),
                    int(f.first - y.begin()));
    }
}

TEST(window_release, the_runner_refuses_a_released_block_inside_the_window) {
    TROUPE_REQUIRE_SHARED(model_path, "models/arch/tiny-gemma2.gguf");
    auto model = load_model(gemma2_config(model_path, golden_setup::builtin_quantized, true), {.kv_groups = true});
    ASSERT_TRUE(model.ok()) << model.message();
    ASSERT_EQ(model->runner->kv_group_windows(), (std::vector<int32_t>{0, 4}));
    // 12 positions of 2-token blocks: the global group 0..5, the windowed group 6..11; the token at 11 reads 8..11.
    std::vector<int32_t> prompt(12, 5);
    forward_batch batch;
    batch.seqs.push_back(sequence_step{0, prompt, 0, {0, 1, 2, 3, 4, 5}});
    batch.seqs[0].more_tables = {{6, 7, 8, 9, 10, 11}};
    forward_output out;
    ASSERT_TRUE(model->runner->forward(batch, out).ok());
    // A decode at 12 reads 9..12: blocks 0..3 (positions 0..7) are out of its window, released; block 4 (8, 9) is not.
    sequence_step next{0, {5}, 12, {0, 1, 2, 3, 4, 5, 12}};
    next.more_tables = {{-1, -1, -1, -1, 10, 11, 13}};
    batch.seqs = {next};
    EXPECT_TRUE(model->runner->forward(batch, out).ok());
    batch.seqs[0].more_tables = {{-1, -1, -1, -1, -1, 11, 13}};
    const status refused = model->runner->forward(batch, out);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.message().find("block 4 of KV group 1 was released (-1) but holds positions inside the window"),
              std::string::npos)
        << refused.message();
    // The global group never has a released entry, and a step without the windowed table is refused.
    batch.seqs[0].block_table[0] = -1;
    batch.seqs[0].more_tables = {{-1, -1, -1, -1, 10, 11, 13}};
    EXPECT_FALSE(model->runner->forward(batch, out).ok());
    batch.seqs[0].block_table[0] = 0;
    batch.seqs[0].more_tables.clear();
    const status missing = model->runner->forward(batch, out);
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.message().find("1 block tables for a model of 2 KV groups"), std::string::npos)
        << missing.message();
}

}  // namespace
}  // namespace troupe
