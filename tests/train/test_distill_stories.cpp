// Distillation on stories260K: the data set's rows line up with the tokens, short training runs of each drafter
// lower the loss, the files written load and are refused for another target, and the small llama of core/train
// computes the logits troupe's own runner computes (so a distilled drafter means at inference what it meant in
// training).
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <memory>
#include <numeric>

#include "core/gguf/gguf_file.h"
#include "core/train/distill.h"
#include "core/train/side_files.h"
#include "tests/common/shared_data.h"

namespace troupe::train {
namespace {

constexpr const char* stories_path = "models/stories260K.gguf";

struct stories_data {
    std::shared_ptr<const gguf::gguf_file> file;
    float_llama target;
    distill_dataset data;
    std::vector<std::pair<size_t, size_t>> progress;  // (done, total) as make_dataset reported it
};

// The stories260K target as the tests run it for data (2 threads, 8 sequences per step).
result<loaded_model> load_stories_target() {
    return load_model(target_config(*::troupe::testing::shared_file(stories_path), 2, 8));
}

// Greedy continuations of stories.txt's openings, 8 sequences per step.
data_params greedy_text_params() {
    data_params p;
    p.text_path = *::troupe::testing::shared_file("text/stories.txt");
    p.temperature = 0;
    p.parallel = 8;
    return p;
}

// Made once for the whole file: 60 openings continued greedily by 24 tokens (a few seconds on 2 cores).
const stories_data& stories() {
    static std::unique_ptr<stories_data> made = [] {
        auto out = std::make_unique<stories_data>();
        const std::string model = *::troupe::testing::shared_file(stories_path);
        auto file = gguf::gguf_file::open(model);
        EXPECT_TRUE(file.ok()) << file.message();
        out->file = *file;
        auto target = read_float_llama(*file, layers_wanted::last);
        EXPECT_TRUE(target.ok()) << target.message();
        out->target = std::move(*target);
        auto loaded = load_stories_target();
        EXPECT_TRUE(loaded.ok()) << loaded.message();
        data_params p = greedy_text_params();
        p.gen_tokens = 24;
        p.max_openings = 60;
        auto data =
            make_dataset(*loaded, p, [&](size_t done, size_t total) { out->progress.emplace_back(done, total); });
        EXPECT_TRUE(data.ok()) << data.message();
        out->data = std::move(*data);
        return out;
    }();
    return *made;
}

#define REQUIRE_STORIES()                                             \
    TROUPE_REQUIRE_SHARED(model_path_, stories_path);                 \
    TROUPE_REQUIRE_SHARED(text_path_, "text/stories.txt");            \
    ASSERT_FALSE(stories().data.train.empty()) << "no data set made"; \
    (void)model_path_;                                                \
    (void)text_path_

std::filesystem::path temp_dir() {
    auto dir = std::filesystem::temp_directory_path() / ("troupe_test_train_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir;
}

// Mean loss of the first and of the last `k` steps.
std::pair<double, double> ends(const std::vector<curve_point>& c, size_t k) {
    double a = 0, b = 0;
    for (size_t i = 0; i < k; ++i) {
        a += c[i].loss;
        b += c[c.size() - 1 - i].loss;
    }
    return {a / k, b / k};
}

TEST(distill_stories, every_sample_row_holds_the_targets_prediction_of_the_next_token) {
    REQUIRE_STORIES();
    const distill_dataset& d = stories().data;
    EXPECT_EQ(d.train.size(), 60u);
    EXPECT_EQ(d.held_out.size(), 6u);
    int64_t checked = 0;
    for (const distill_sample& s : d.train) {
        ASSERT_EQ(s.hidden.size(), static_cast<size_t>(s.size()) * d.dim);
        ASSERT_EQ(s.logits.size(), static_cast<size_t>(s.size()) * d.n_vocab);
        EXPECT_GT(s.size(), s.n_prompt);
        // Greedy continuations: the token after each position of the continuation is its row's argmax.
        for (int32_t j = s.n_prompt - 1; j + 1 < s.size(); ++j) {
            const float* row = s.logits.data() + static_cast<int64_t>(j) * d.n_vocab;
            EXPECT_EQ(std::max_element(row, row + d.n_vocab) - row, s.tokens[j + 1]) << "position " << j;
            checked += 1;
        }
        // The logits are the output matrix applied to the normed hidden state.
        const std::vector<float> f = normed_features(s, stories().target);
        const int32_t j = s.size() / 2;
        double z = 0;
        for (int32_t i = 0; i < d.dim; ++i)
            z += static_cast<double>(stories().target.output[7 * d.dim + i]) * f[j * d.dim + i];
        EXPECT_NEAR(z, s.logits[static_cast<int64_t>(j) * d.n_vocab + 7], 1e-3);
    }
    EXPECT_GT(checked, 1000);
}

// Openings of one line read the longest one's prefill (share_prefixes): the same tokens and, within float
// rounding, the same rows as when each opening is prefilled on its own. Openings every 16 tokens, so that most share.
TEST(distill_stories, openings_that_share_a_lines_prefill_get_the_rows_of_their_own_prefill) {
    REQUIRE_STORIES();
    auto loaded = load_stories_target();
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    data_params p = greedy_text_params();
    p.gen_tokens = 8;
    p.open_stride = 16;
    p.max_openings = 40;
    auto shared = make_dataset(*loaded, p);
    ASSERT_TRUE(shared.ok()) << shared.message();
    p.share_prefixes = false;
    auto alone = make_dataset(*loaded, p);
    ASSERT_TRUE(alone.ok()) << alone.message();
    ASSERT_EQ(shared->train.size(), alone->train.size());
    int32_t longer_than_a_block = 0;
    for (size_t i = 0; i < shared->train.size(); ++i) {
        const distill_sample &a = shared->train[i], &b = alone->train[i];
        ASSERT_EQ(a.tokens, b.tokens) << "opening " << i;
        ASSERT_EQ(a.hidden.size(), b.hidden.size());
        longer_than_a_block += a.n_prompt > 16;
        for (size_t j = 0; j < a.hidden.size(); ++j) ASSERT_NEAR(a.hidden[j], b.hidden[j], 1e-3) << "opening " << i;
        for (size_t j = 0; j < a.logits.size(); ++j) ASSERT_NEAR(a.logits[j], b.logits[j], 1e-3) << "opening " << i;
    }
    EXPECT_GT(longer_than_a_block, 20);
}

TEST(distill_stories, a_data_set_larger_than_its_memory_budget_is_refused_before_any_work) {
    REQUIRE_STORIES();
    auto loaded = load_stories_target();
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    data_params p = greedy_text_params();
    p.memory_budget = 1 << 20;  // 1 MiB: stories.txt's openings need far more
    bool called = false;
    auto data = make_dataset(*loaded, p, [&](size_t, size_t) { called = true; });
    ASSERT_FALSE(data.ok());
    EXPECT_NE(data.message().find("GiB"), std::string::npos) << data.message();
    EXPECT_NE(data.message().find("--max-openings"), std::string::npos) << data.message();
    EXPECT_FALSE(called) << "openings were continued before the refusal";
    p.max_openings = 4;  // a few openings fit in 32 MiB
    p.gen_tokens = 8;
    p.memory_budget = 32 << 20;
    EXPECT_TRUE(make_dataset(*loaded, p).ok());
}

TEST(distill_stories, the_data_reports_its_progress_per_group_of_parallel_continuations) {
    REQUIRE_STORIES();
    const stories_data& s = stories();
    const size_t total = s.data.train.size() + s.data.held_out.size();
    const size_t groups = (s.data.train.size() + 7) / 8 + (s.data.held_out.size() + 7) / 8;  // parallel 8
    ASSERT_EQ(s.progress.size(), groups);
    size_t before = 0;
    for (const auto& [done, of] : s.progress) {
        EXPECT_EQ(of, total);
        EXPECT_GT(done, before);
        EXPECT_LE(done - before, 8u);
        before = done;
    }
    EXPECT_EQ(before, total);
}

TEST(distill_stories, training_medusa_heads_lowers_the_loss_and_raises_held_out_agreement) {
    REQUIRE_STORIES();
    const stories_data& s = stories();
    cpu::thread_pool pool(2);
    medusa_heads heads(2, s.target.hp.dim, s.target.hp.n_vocab, s.target.output);
    const std::vector<double> before = medusa_accuracy(heads, s.target, s.data.held_out, pool);
    train_params p;
    p.steps = 150;
    p.batch = 128;
    p.lr = 3e-3f;
    const std::vector<curve_point> curve = train_medusa(heads, s.target, s.data, p, pool, nullptr);
    ASSERT_EQ(curve.size(), 150u);
    const auto [first, last] = ends(curve, 10);
    EXPECT_LT(last, 0.7 * first) << "loss " << first << " -> " << last;
    const std::vector<double> after = medusa_accuracy(heads, s.target, s.data.held_out, pool);
    EXPECT_GT(after[0], before[0] + 0.05) << before[0] << " -> " << after[0];

    // The file: the spec's keys and shapes; loads; refused for another target.
    const std::string out = (temp_dir() / "medusa.gguf").string();
    auto id = identify_target(*s.file);
    ASSERT_TRUE(id.ok()) << id.message();
    ASSERT_TRUE(write_medusa_file(out, heads, *id));
    auto side = gguf::gguf_file::open(out);
    ASSERT_TRUE(side.ok()) << side.message();
    EXPECT_EQ((*side)->string_or("general.architecture", ""), "medusa");
    EXPECT_EQ((*side)->uint_or("medusa.n_heads", 0), 2u);
    EXPECT_EQ((*side)->uint_or("medusa.target.dim", 0), 64u);
    EXPECT_EQ((*side)->string_or("medusa.target.fingerprint", ""), id->fingerprint);
    const std::vector<int64_t> fc{64, 64}, bias{64}, output{64, 512};
    EXPECT_TRUE((*side)->tensor("medusa.1.fc.weight", fc).ok());
    EXPECT_TRUE((*side)->tensor("medusa.1.fc.bias", bias).ok());
    EXPECT_TRUE((*side)->tensor("medusa.1.output.weight", output).ok());
    EXPECT_TRUE(check_made_for(**side, *s.file));
    TROUPE_REQUIRE_SHARED(other_path, "models/llama-2-tiny-random.gguf");
    auto other = gguf::gguf_file::open(other_path);
    ASSERT_TRUE(other.ok()) << other.message();
    const status refused = check_made_for(**side, **other);
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.message().find("made for another model (fingerprint " + id->fingerprint), std::string::npos)
        << refused.message();
    EXPECT_FALSE(check_made_for(**other, *s.file)) << "a file without the keys is refused";
}

TEST(distill_stories, training_the_eagle_layer_lowers_the_loss) {
    REQUIRE_STORIES();
    const stories_data& s = stories();
    cpu::thread_pool pool(2);
    eagle_layer layer(s.target);
    train_params p;
    p.steps = 60;
    p.batch = 256;
    p.lr = 3e-3f;
    const std::vector<curve_point> curve = train_eagle(layer, s.data, p, pool, nullptr);
    const auto [first, last] = ends(curve, 6);
    EXPECT_LT(last, 0.8 * first) << "loss " << first << " -> " << last;
    EXPECT_GT(curve.back().feature, 0.0);
    // Depth 1 of a chain is every row's own draft: the plain accuracy; deeper drafts are counted where the ones
    // before matched, so they are shares too.
    const std::vector<double> chain = eagle_chain_accuracy(layer, s.data.held_out, 3, pool);
    ASSERT_EQ(chain.size(), 3u);
    EXPECT_NEAR(chain[0], eagle_accuracy(layer, s.data.held_out, pool), 1e-12);
    EXPECT_GT(chain[1], 0.1);
    EXPECT_GT(chain[2], 0.0) << chain[0] << " " << chain[1];
    EXPECT_LE(chain[2], 1.0);

    const std::string out = (temp_dir() / "eagle.gguf").string();
    auto id = identify_target(*s.file);
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE(write_eagle_file(out, layer, *id));
    auto side = gguf::gguf_file::open(out);
    ASSERT_TRUE(side.ok()) << side.message();
    EXPECT_EQ((*side)->string_or("general.architecture", ""), "eagle");
    EXPECT_EQ((*side)->uint_or("eagle.n_kv_heads", 0), 4u);
    EXPECT_EQ((*side)->uint_or("eagle.ffn_length", 0), 172u);
    const std::vector<int64_t> fc{128, 64}, k{64, 32}, down{172, 64};
    EXPECT_TRUE((*side)->tensor("eagle.fc.weight", fc).ok());
    EXPECT_TRUE((*side)->tensor("eagle.attn_k.weight", k).ok());
    EXPECT_TRUE((*side)->tensor("eagle.ffn_down.weight", down).ok());
    EXPECT_TRUE(check_made_for(**side, *s.file));
}

TEST(distill_stories, training_a_small_draft_lowers_both_kl_losses) {
    REQUIRE_STORIES();
    const stories_data& s = stories();
    cpu::thread_pool pool(2);
    for (distill_loss kind : {distill_loss::kl, distill_loss::reverse_kl}) {
        llama_hparams hp = s.target.hp;
        hp.dim = 16;
        hp.n_layers = 1;
        hp.n_heads = 2;
        hp.n_kv_heads = 1;
        hp.head_dim = 8;
        hp.rope_dims = 8;
        hp.ffn_dim = 32;
        tiny_llama m(hp, 3);
        train_params p;
        p.steps = 60;
        p.batch = 256;
        p.lr = 1e-2f;
        p.loss = kind;
        const std::vector<curve_point> curve = train_draft(m, s.data, p, pool, nullptr);
        const auto [first, last] = ends(curve, 6);
        EXPECT_LT(last, 0.8 * first) << (kind == distill_loss::kl ? "kl" : "reverse kl") << " " << first << " -> "
                                     << last;
    }
}

// tiny_llama from stories260K's own weights against troupe's runner on the same file, then against the runner on
// the draft file it writes: the logits of every position agree.
TEST(distill_stories, the_training_graph_computes_what_troupes_runner_computes_and_the_draft_file_runs) {
    REQUIRE_STORIES();
    const stories_data& s = stories();
    cpu::thread_pool pool(2);
    auto all = read_float_llama(s.file, layers_wanted::all);
    ASSERT_TRUE(all.ok()) << all.message();
    tiny_llama m(*all);
    const distill_sample& sample = s.data.held_out.front();
    const int64_t n = sample.size(), nv = s.target.hp.n_vocab;
    std::vector<int32_t> positions(n);
    std::iota(positions.begin(), positions.end(), 0);
    std::vector<float> logits(n * nv);
    m.forward(sample.tokens, positions, {0, n}, logits.data(), pool);
    for (int64_t i = 0; i < n * nv; ++i) ASSERT_NEAR(logits[i], sample.logits[i], 2e-3) << "row " << i / nv;

    const std::string out = (temp_dir() / "draft.gguf").string();
    auto id = identify_target(*s.file);
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE(write_draft_file(out, m, *s.file, *id));
    auto loaded = load_model(target_config(out, 1, 1));
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    forward_batch batch;
    sequence_step step;
    step.seq_id = 0;
    step.tokens = sample.tokens;
    step.pos0 = 0;
    const int32_t bs = loaded->runner->kv().block_size;
    for (int32_t b = 0; b * bs < n; ++b) step.block_table.push_back(b);
    step.all_logits = true;
    batch.seqs.push_back(step);
    forward_output fo;
    ASSERT_TRUE(loaded->runner->forward(batch, fo));
    for (int64_t i = 0; i < n * nv; ++i) ASSERT_NEAR(fo.logits[i], logits[i], 2e-3) << "row " << i / nv;
    auto side = gguf::gguf_file::open(out);
    ASSERT_TRUE(side.ok());
    EXPECT_TRUE(check_made_for(**side, *s.file));
}

}  // namespace
}  // namespace troupe::train
