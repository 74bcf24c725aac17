// spec/medusa and spec/eagle on stories260K with heads distilled by core/train (the code of `troupe distill`, short
// runs): greedy text through the whole engine equals the golden continuation while drafts are accepted; bad inputs
// are refused with one clear error each; and the plugin's EAGLE forward computes what core/train's trains.
#include <gtest/gtest.h>

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <numeric>

#include "actors/engine/engine.h"
#include "actors/engine/engine_from_model.h"
#include "actors/engine/engine_params_from.h"
#include "actors/tokenizer/tokenizer_codec.h"
#include "core/gguf/gguf_file.h"
#include "core/gguf/gguf_writer.h"
#include "core/loader/model_loader.h"
#include "core/plugin_host/plugin_model_services.h"
#include "core/train/distill.h"
#include "core/train/side_files.h"
#include "kernels/ref/quants.h"
#include "plugins/common/target_model.h"
#include "plugins/spec/eagle/eagle_drafter.h"
#include "plugins/spec/eagle/eagle_forward.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_runs.h"

namespace troupe {
namespace {

using namespace troupe::train;

constexpr const char* stories_path = "models/stories260K.gguf";

// The target, a small self-distillation set, and heads trained briefly on it, written where the plugins read them.
struct fixture_data {
    std::shared_ptr<const gguf::gguf_file> file;
    float_llama target;
    distill_dataset data;
    std::string medusa_path, eagle_path, other_medusa_path;
    double medusa_head0_accuracy = 0;
    std::unique_ptr<eagle_layer> eagle;
};

std::filesystem::path temp_dir() {
    auto dir = std::filesystem::temp_directory_path() / ("troupe_test_spec_heads_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir;
}

const fixture_data& data() {
    static std::unique_ptr<fixture_data> made = [] {
        auto out = std::make_unique<fixture_data>();
        const std::string model = *testing::shared_file(stories_path);
        auto file = gguf::gguf_file::open(model);
        EXPECT_TRUE(file.ok()) << file.message();
        out->file = *file;
        auto target = read_float_llama(*file, layers_wanted::last);
        EXPECT_TRUE(target.ok()) << target.message();
        out->target = std::move(*target);
        auto loaded = load_model(target_config(model, 2, 8));
        EXPECT_TRUE(loaded.ok()) << loaded.message();
        data_params p;
        p.text_path = *testing::shared_file("text/stories.txt");
        p.gen_tokens = 24;
        p.temperature = 0;
        p.max_openings = 60;
        p.parallel = 8;
        auto set = make_dataset(*loaded, p);
        EXPECT_TRUE(set.ok()) << set.message();
        out->data = std::move(*set);
        cpu::thread_pool pool(2);
        train_params tp;
        tp.steps = 150;
        tp.batch = 128;
        tp.lr = 3e-3f;
        medusa_heads heads(3, out->target.hp.dim, out->target.hp.n_vocab, out->target.output);
        train_medusa(heads, out->target, out->data, tp, pool, nullptr);
        out->medusa_head0_accuracy = medusa_accuracy(heads, out->target, out->data.held_out, pool)[0];
        out->eagle = std::make_unique<eagle_layer>(out->target);
        tp.steps = 80;
        tp.batch = 256;
        train_eagle(*out->eagle, out->data, tp, pool, nullptr);
        auto id = identify_target(*out->file);
        EXPECT_TRUE(id.ok()) << id.message();
        out->medusa_path = (temp_dir() / "medusa.gguf").string();
        out->eagle_path = (temp_dir() / "eagle.gguf").string();
        EXPECT_TRUE(write_medusa_file(out->medusa_path, heads, *id));
        EXPECT_TRUE(write_eagle_file(out->eagle_path, *out->eagle, *id));
        // The same heads recorded as made for another model (llama-2-tiny-random's id).
        if (auto other = testing::shared_file("models/llama-2-tiny-random.gguf")) {
            auto other_file = gguf::gguf_file::open(*other);
            EXPECT_TRUE(other_file.ok());
            auto other_id = identify_target(**other_file);
            EXPECT_TRUE(other_id.ok()) << other_id.message();
            out->other_medusa_path = (temp_dir() / "medusa-other.gguf").string();
            EXPECT_TRUE(write_medusa_file(out->other_medusa_path, heads, *other_id));
        }
        return out;
    }();
    return *made;
}

#define REQUIRE_STORIES()                                                  \
    TROUPE_REQUIRE_SHARED(model_path_, stories_path);                      \
    TROUPE_REQUIRE_SHARED(text_path_, "text/stories.txt");                 \
    TROUPE_REQUIRE_SHARED(golden_path_, "golden/stories260K-greedy.json"); \
    ASSERT_FALSE(data().data.train.empty()) << "no data set made";         \
    (void)text_path_

engine_config spec_config(const std::string& model, const std::string& plugin, const YAML::Node& params) {
    engine_config config;
    config.model = model;
    config.scheduler.max_running_seqs = 4;
    config.plugins.spec = plugin_config(plugin);
    config.plugins.spec.params = params;
    return config;
}

struct greedy_run {
    std::string text, expected;
    usage use;
    std::string error;
};

// The golden prompt through the engine with the plugin, greedy, 48 tokens.
greedy_run run_greedy(const std::string& model, const std::string& golden, const std::string& plugin,
                      const YAML::Node& params) {
    greedy_run out;
    const testing::golden_run run = testing::load_golden_runs(golden).front();
    engine_config config = spec_config(model, plugin, params);
    auto m = load_model(config);
    if (!m.ok()) {
        out.error = m.message();
        return out;
    }
    auto detok = make_tokenizer_codec(m->tok)->make_decoder();
    for (int32_t id : run.generated_ids) out.expected += detok->push(id);
    out.expected += detok->flush();
    engine_params params_e = engine_params_from(config);
    engine eng(engine_parts_from(*m, params_e), params_e);
    EXPECT_TRUE(eng.start().ok());
    std::mutex mutex;
    std::condition_variable cv;
    bool ended = false;
    request_sink sink;
    sink.on_text = [&](std::string_view d) {
        std::lock_guard lock(mutex);
        out.text += d;
    };
    sink.on_done = [&](finish_reason, const usage& u, const timings&) {
        std::lock_guard lock(mutex);
        out.use = u;
        ended = true;
        cv.notify_all();
    };
    sink.on_error = [&](const std::string& e) {
        std::lock_guard lock(mutex);
        out.error = e;
        ended = true;
        cv.notify_all();
    };
    sampling_params p;
    p.temperature = 0.0f;
    p.max_tokens = 48;
    p.ignore_eos = true;
    EXPECT_TRUE(eng.submit(request{run.prompt, p, std::nullopt}, std::move(sink)).ok());
    {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return ended; });
    }
    EXPECT_TRUE(eng.stop(std::chrono::milliseconds(1000)).ok());
    return out;
}

// The run kept the golden text and the target accepted some of the plugin's drafts. Call through
// ASSERT_NO_FATAL_FAILURE.
void expect_golden_text_and_accepted_drafts(const greedy_run& r) {
    ASSERT_EQ(r.error, "");
    EXPECT_EQ(r.text, r.expected);
    EXPECT_GT(r.use.n_draft_tokens, 0);
    EXPECT_GT(r.use.n_draft_accepted, 0);
}

YAML::Node params_of(const std::string& text) {
    return YAML::Load(text);
}

TEST(spec_heads, distilled_medusa_heads_keep_the_golden_greedy_text_and_their_drafts_are_accepted) {
    REQUIRE_STORIES();
    YAML::Node p;
    p["heads"] = data().medusa_path;
    const greedy_run r = run_greedy(model_path_, golden_path_, "medusa", p);
    ASSERT_NO_FATAL_FAILURE(expect_golden_text_and_accepted_drafts(r));
    std::printf("medusa: %d of %d draft tokens accepted over 48 tokens (held-out head-0 agreement %.2f)\n",
                r.use.n_draft_accepted, r.use.n_draft_tokens, data().medusa_head0_accuracy);
}

TEST(spec_heads, a_medusa_tree_given_by_explicit_choices_keeps_the_golden_greedy_text) {
    REQUIRE_STORIES();
    YAML::Node p = params_of("{choices: [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]}");
    p["heads"] = data().medusa_path;
    const greedy_run r = run_greedy(model_path_, golden_path_, "medusa", p);
    ASSERT_NO_FATAL_FAILURE(expect_golden_text_and_accepted_drafts(r));
}

TEST(spec_heads, a_distilled_eagle_layer_keeps_the_golden_greedy_text_and_its_drafts_are_accepted) {
    REQUIRE_STORIES();
    for (const char* shape : {"{}", "{max_nodes: 8, depth: 4, topk: 2}", "{max_nodes: 1, depth: 1, topk: 1}"}) {
        SCOPED_TRACE(shape);
        YAML::Node p = params_of(shape);
        p["layer"] = data().eagle_path;
        const greedy_run r = run_greedy(model_path_, golden_path_, "eagle", p);
        ASSERT_NO_FATAL_FAILURE(expect_golden_text_and_accepted_drafts(r));
        std::printf("eagle %s: %d of %d draft tokens accepted over 48 tokens\n", shape, r.use.n_draft_accepted,
                    r.use.n_draft_tokens);
    }
}

// min_confidence leaves out the drafts less likely than the bound along their path (Medusa's product of the heads'
// probabilities, EAGLE's of the layer's): fewer drafts, the same golden text; a bound of nearly 1 drafts nothing.
TEST(spec_heads, medusa_and_eagle_screened_by_min_confidence_draft_less_and_keep_the_golden_text) {
    REQUIRE_STORIES();
    const std::pair<const char*, std::string> plugins[] = {{"medusa", "heads"}, {"eagle", "layer"}};
    for (const auto& [plugin, file_key] : plugins) {
        SCOPED_TRACE(plugin);
        const std::string file = std::string(plugin) == "medusa" ? data().medusa_path : data().eagle_path;
        int32_t drafted[3] = {};
        const float bounds[] = {0.0f, 0.05f, 0.999f};
        for (int i = 0; i < 3; ++i) {
            YAML::Node p;
            p[file_key] = file;
            p["min_confidence"] = bounds[i];
            const greedy_run r = run_greedy(model_path_, golden_path_, plugin, p);
            ASSERT_EQ(r.error, "");
            EXPECT_EQ(r.text, r.expected) << "min_confidence " << bounds[i];
            drafted[i] = r.use.n_draft_tokens;
            std::printf("%s min_confidence %.3f: %d of %d draft tokens accepted over 48 tokens\n", plugin,
                        static_cast<double>(bounds[i]), r.use.n_draft_accepted, r.use.n_draft_tokens);
        }
        EXPECT_GT(drafted[0], drafted[1]);
        EXPECT_GT(drafted[1], 0);
        EXPECT_LT(drafted[2], drafted[1]);
    }
}

struct refusal_case {
    const char* name;
    const char* plugin;
    std::string params;  // YAML; $MEDUSA, $EAGLE, $OTHER are replaced by the fixture's files
    const char* expected;
};

std::string with_paths(std::string s) {
    const std::pair<const char*, std::string> subs[] = {
        {"$MEDUSA", data().medusa_path}, {"$EAGLE", data().eagle_path}, {"$OTHER", data().other_medusa_path}};
    for (const auto& [key, value] : subs) {
        for (size_t at = s.find(key); at != std::string::npos; at = s.find(key)) s.replace(at, std::strlen(key), value);
    }
    return s;
}

TEST(spec_heads, bad_heads_files_and_trees_are_refused_with_one_clear_error_each) {
    REQUIRE_STORIES();
    TROUPE_REQUIRE_SHARED(other_model, "models/llama-2-tiny-random.gguf");
    (void)other_model;
    const std::vector<refusal_case> cases = {
        {"no file named", "medusa", "{}", "params.heads: required"},
        {"a missing file", "medusa", "{heads: /nonexistent/heads.gguf}", "params.heads: "},
        {"a file for another model", "medusa", "{heads: $OTHER}", "made for another model (fingerprint "},
        {"an EAGLE file as heads", "medusa", "{heads: $EAGLE}", "general.architecture is 'eagle', expected 'medusa'"},
        {"a tree deeper than the heads", "medusa", "{heads: $MEDUSA, topk: [2, 2, 2, 2]}",
         "params.topk: the tree is 4 deep, but "},
        {"a tree over 256 nodes", "medusa", "{heads: $MEDUSA, topk: [8, 8, 8]}", "params.topk: the tree of every "},
        {"choices missing a parent path", "medusa", "{heads: $MEDUSA, choices: [[0], [1, 0]]}",
         "params.choices: path [1, 0] has no parent path"},
        {"no layer named", "eagle", "{}", "params.layer: required"},
        {"a missing layer file", "eagle", "{layer: /nonexistent/eagle.gguf}", "params.layer: "},
        {"Medusa heads as the layer", "eagle", "{layer: $MEDUSA}",
         "general.architecture is 'medusa', expected 'eagle'"},
        {"a tree over 256 nodes", "eagle", "{layer: $EAGLE, max_nodes: 300}", "params.max_nodes: must be between 1"},
    };
    for (const refusal_case& c : cases) {
        SCOPED_TRACE(c.name);
        auto m = load_model(spec_config(model_path_, c.plugin, params_of(with_paths(c.params))));
        ASSERT_FALSE(m.ok());
        EXPECT_NE(m.message().find(c.expected), std::string::npos) << m.message();
        EXPECT_EQ(m.message().find('\n'), std::string::npos) << "one line: " << m.message();
    }
}

// The fixture's distilled EAGLE layer as the plugin holds it, in float32 (no rounding of its own), with the target's
// tables.
eagle::eagle_weights fixture_eagle_weights() {
    const fixture_data& d = data();
    using spec_common::packed_matrix;
    using spec_common::weight_format;
    const auto f32 = [](const param& p) {
        return packed_matrix(p.v(), p.dims.size() > 1 ? p.dims[1] : 1, p.dims[0], weight_format::f32);
    };
    eagle::eagle_weights w = eagle::layer_weights(*d.eagle, f32, [](const param& p) { return p.v(); });
    w.output = packed_matrix(d.target.output.data(), d.target.hp.n_vocab, d.target.hp.dim, weight_format::f32);
    w.token_embd = d.target.token_embd.data();
    w.output_norm = d.target.output_norm.data();
    return w;
}

// Context rows of a held-out sample through the plugin's forward (its own cache, rows one by one as at inference)
// and through core/train's eagle_layer (the training graph): the same features and logits.
TEST(spec_heads, the_plugins_eagle_forward_equals_the_training_forward_on_the_same_rows) {
    REQUIRE_STORIES();
    const fixture_data& d = data();
    eagle_layer& layer = *d.eagle;
    const distill_sample& s = d.data.held_out.front();
    const llama_hparams& hp = d.target.hp;
    const int64_t n = s.size() - 1, dim = hp.dim, nv = hp.n_vocab;
    eagle_batch b;
    b.bounds = {0, n};
    for (int64_t j = 0; j < n; ++j) {
        b.tokens.push_back(s.tokens[j + 1]);
        b.positions.push_back(static_cast<int32_t>(j));
    }
    b.features.assign(s.hidden.begin(), s.hidden.begin() + n * dim);
    std::vector<float> g_train(n * dim), logits_train(n * nv);
    cpu::thread_pool pool(2);
    layer.forward(b, g_train.data(), logits_train.data(), pool);

    const eagle::eagle_shape sh = eagle::shape_of(hp);
    eagle::eagle_forward fwd(sh, fixture_eagle_weights());
    eagle::eagle_cache cache;
    std::vector<float> g(dim), logits(nv);
    double max_g = 0, max_logit = 0;
    for (int64_t j = 0; j < n; ++j) {
        eagle::eagle_row row;
        row.token = s.tokens[j + 1];
        row.feature = s.hidden.data() + j * dim;
        row.position = static_cast<int32_t>(j);
        row.cache = &cache;
        row.slot = static_cast<int32_t>(j);
        row.n_prefix = static_cast<int32_t>(j);
        row.want_logits = true;
        cache.reserve_rows(row.slot + 1, sh.kv_width());
        ASSERT_EQ(fwd.run({row}, g.data(), logits.data(), nullptr), TROUPE_OK);
        cache.n_rows = row.slot + 1;
        for (int64_t i = 0; i < dim; ++i) max_g = std::max(max_g, std::abs(double{g[i]} - g_train[j * dim + i]));
        for (int64_t i = 0; i < nv; ++i)
            max_logit = std::max(max_logit, std::abs(double{logits[i]} - logits_train[j * nv + i]));
    }
    // The layer was trained: its attention and FFN branches are not zero, so this compares every part.
    double wo_norm = 0;
    for (float x : layer.wo.value) wo_norm += std::abs(x);
    EXPECT_GT(wo_norm, 0.0);
    EXPECT_LT(max_g, 1e-3) << "features";
    EXPECT_LT(max_logit, 1e-3) << "logits";
}

// The target's features of positions 0 .. n-2 of sample s for the drafter (its prefill of the first n - 1 tokens).
void observe_prefill_features(eagle::eagle_drafter& drafter, int64_t seq, const distill_sample& s,
                              const llama_hparams& hp) {
    const auto n = static_cast<int32_t>(s.size());
    std::vector<int64_t> seq_ids(static_cast<size_t>(n - 1), seq);
    std::vector<int32_t> positions(static_cast<size_t>(n - 1));
    std::iota(positions.begin(), positions.end(), 0);
    troupe_tap_data tap{};
    tap.struct_size = sizeof tap;
    tap.version = TROUPE_TAP_DATA_VERSION;
    tap.tap = TROUPE_TAP_LAYER_OUT;
    tap.layer = hp.n_layers - 1;
    tap.n_rows = n - 1;
    tap.width = hp.dim;
    tap.data = s.hidden.data();
    tap.seq_ids = seq_ids.data();
    tap.positions = positions.data();
    drafter.taps().observe(tap);
}

// A drafter with params dp that has seen the prefill features of sample s for sequence seq.
std::unique_ptr<eagle::eagle_drafter> drafter_after_prefill(const eagle::drafter_params& dp, int64_t seq,
                                                            const distill_sample& s, const llama_hparams& hp) {
    auto drafter = std::make_unique<eagle::eagle_drafter>(eagle::shape_of(hp), fixture_eagle_weights(), dp);
    drafter->begin(seq);
    observe_prefill_features(*drafter, seq, s, hp);
    return drafter;
}

// One proposal after the whole of sample s: its tokens and parents (n_nodes of them).
struct eagle_chain {
    std::vector<int32_t> tokens, parents;
};
eagle_chain propose_after(eagle::eagle_drafter& drafter, int64_t seq, const distill_sample& s) {
    const eagle::drafter_params& dp = drafter.params();
    troupe_spec_request q{};
    q.struct_size = sizeof q;
    q.version = TROUPE_SPEC_REQUEST_VERSION;
    q.seq_id = seq;
    q.tokens = s.tokens.data();
    q.n_tokens = static_cast<int64_t>(s.size());
    q.n_new = 1;
    q.max_nodes = dp.max_nodes;
    q.max_depth = dp.depth;
    eagle_chain c;
    c.tokens.resize(static_cast<size_t>(dp.max_nodes));
    c.parents.resize(c.tokens.size());
    troupe_spec_proposal out{};
    out.struct_size = sizeof out;
    out.version = TROUPE_SPEC_PROPOSAL_VERSION;
    out.tokens = c.tokens.data();
    out.parents = c.parents.data();
    EXPECT_EQ(drafter.propose(&q, 1, &out, nullptr), TROUPE_OK);
    c.tokens.resize(static_cast<size_t>(out.n_nodes));
    c.parents.resize(c.tokens.size());
    return c;
}

// After a prompt (or a stretch run without drafts) the drafter keeps and computes only the newest `catch_up` context
// rows of the layer, and still proposes; with 0 it keeps and computes every row the target's features cover.
TEST(spec_heads, the_eagle_drafter_catches_up_at_most_its_bound_of_context_rows) {
    REQUIRE_STORIES();
    const fixture_data& d = data();
    const distill_sample& s = d.data.held_out.front();
    const llama_hparams& hp = d.target.hp;
    const auto n = static_cast<int32_t>(s.size());
    ASSERT_GT(n, 12);
    for (const int32_t bound : {0, 5}) {
        SCOPED_TRACE(bound);
        eagle::drafter_params dp;
        dp.catch_up = bound;
        constexpr int64_t seq = 7;
        const std::unique_ptr<eagle::eagle_drafter> owned = drafter_after_prefill(dp, seq, s, hp);
        eagle::eagle_drafter& drafter = *owned;
        // A step without drafts: the features the bound leaves out go, the others stay.
        const int32_t own_token[] = {-1};
        drafter.accepted(seq, own_token, 1);
        EXPECT_EQ(drafter.taps().at(seq, n - 2 - 4) != nullptr, true);
        EXPECT_EQ(drafter.taps().at(seq, n - 2 - 5) != nullptr, bound == 0);

        const eagle_chain out = propose_after(drafter, seq, s);
        // Rows j = 0 .. n-2 take (t_{j+1}, h_j): n - 1 rows in all, the newest `bound` of them when bounded.
        EXPECT_EQ(drafter.context_rows(seq), bound == 0 ? n - 1 : bound);
        ASSERT_EQ(static_cast<int32_t>(out.tokens.size()), dp.max_nodes);
        EXPECT_EQ(out.parents[0], -1);
    }
}

// With min_confidence the chain stops at its first node less likely than that along its path: the proposal is the
// prefix of the unbounded chain whose cumulative draft probabilities reach the bound (none when the first does not).
TEST(spec_heads, the_eagle_drafter_stops_its_chain_where_the_drafts_confidence_falls_below_the_bound) {
    REQUIRE_STORIES();
    const fixture_data& d = data();
    const distill_sample& s = d.data.held_out.front();
    const llama_hparams& hp = d.target.hp;
    struct chain {
        std::vector<int32_t> tokens, parents;
        std::vector<float> confidences;
    };
    const auto propose = [&](float min_confidence) {
        eagle::drafter_params dp;
        dp.min_confidence = min_confidence;
        constexpr int64_t seq = 3;
        const std::unique_ptr<eagle::eagle_drafter> drafter = drafter_after_prefill(dp, seq, s, hp);
        const eagle_chain c = propose_after(*drafter, seq, s);
        EXPECT_EQ(drafter->confidences(0).size(), c.tokens.size());
        return chain{c.tokens, c.parents, drafter->confidences(0)};
    };
    const chain all = propose(0.0f);
    ASSERT_EQ(all.tokens.size(), 5u);
    for (size_t i = 0; i < all.tokens.size(); ++i) {
        EXPECT_EQ(all.parents[i], static_cast<int32_t>(i) - 1);
        EXPECT_GT(all.confidences[i], 0.0f);
        EXPECT_LE(all.confidences[i], i == 0 ? 1.0f : all.confidences[i - 1]);
    }
    std::printf("chain confidences:");
    for (float c : all.confidences) std::printf(" %.4f", static_cast<double>(c));
    std::printf("\n");
    int32_t bounds_tried = 0;
    for (size_t keep = 0; keep <= all.tokens.size(); ++keep) {
        SCOPED_TRACE(keep);
        // A bound halfway between the last kept node's confidence (1 for none) and the first dropped one's (0).
        const float above = keep == 0 ? 1.0f : all.confidences[keep - 1];
        const float below = keep == all.tokens.size() ? 0.0f : all.confidences[keep];
        if (!(below < above)) continue;  // equal confidences cannot be split
        const chain c = propose(0.5f * (above + below));
        ++bounds_tried;
        ASSERT_EQ(c.tokens.size(), keep);
        for (size_t i = 0; i < keep; ++i) {
            EXPECT_EQ(c.tokens[i], all.tokens[i]);
            EXPECT_EQ(c.parents[i], all.parents[i]);
            EXPECT_FLOAT_EQ(c.confidences[i], all.confidences[i]);
        }
    }
    EXPECT_GE(bounds_tried, 4) << "most of the chain's confidences should differ";
}

// The EAGLE drafter's chain shortens by a level per doubling of the sequences it drafts for together (at least one
// level), its node cap in proportion; with shrink_with_batch off every batch gets the configured tree.
TEST(spec_heads, the_eagle_drafters_chain_shortens_as_the_batch_grows) {
    eagle::eagle_shape sh;
    sh.dim = 64;
    eagle::drafter_params p;
    p.depth = 5;
    p.max_nodes = 5;
    const eagle::eagle_drafter d(sh, eagle::eagle_weights{}, p);
    using limits = std::pair<int32_t, int32_t>;
    EXPECT_EQ(d.limits_for(1), (limits{5, 5}));
    EXPECT_EQ(d.limits_for(2), (limits{4, 4}));
    EXPECT_EQ(d.limits_for(3), (limits{4, 4}));
    EXPECT_EQ(d.limits_for(4), (limits{3, 3}));
    EXPECT_EQ(d.limits_for(15), (limits{2, 2}));
    EXPECT_EQ(d.limits_for(16), (limits{1, 1}));
    EXPECT_EQ(d.limits_for(64), (limits{1, 1}));
    p.depth = 4;
    p.max_nodes = 8;  // a tree
    EXPECT_EQ(eagle::eagle_drafter(sh, eagle::eagle_weights{}, p).limits_for(2), (limits{3, 6}));
    p.shrink_with_batch = false;
    EXPECT_EQ(eagle::eagle_drafter(sh, eagle::eagle_weights{}, p).limits_for(16), (limits{4, 8}));
}

// The plugins read the target's output matrix and embeddings through the SDK in the types k-quant files keep them in:
// Q6_K decoded by plugins/common equals the reference dequantizer on rand10M-Q6_K's output.weight.
TEST(spec_heads, the_targets_q6_k_output_matrix_decodes_as_the_reference_does) {
    TROUPE_REQUIRE_SHARED(path, "models/rand10M-Q6_K.gguf");
    auto file = gguf::gguf_file::open(path);
    ASSERT_TRUE(file.ok()) << file.message();
    const gguf::tensor_info* t = (*file)->find_tensor("output.weight");
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->type, ggml_type::q6_k);
    const int64_t n_in = t->dims[0], n_out = t->dims[1];
    auto services = make_model_services(*file);
    auto m =
        spec_common::float_matrix::read(*services, services->model, "rand10M-Q6_K", "output.weight", {n_in, n_out});
    std::vector<float> ref(static_cast<size_t>(n_in));
    const size_t row_bytes = t->n_bytes / static_cast<size_t>(n_out);
    for (int64_t r : {int64_t{0}, n_out / 2, n_out - 1}) {
        ref::dequantize_row_q6_k(reinterpret_cast<const block_q6_k*>(t->data + static_cast<size_t>(r) * row_bytes),
                                 ref.data(), n_in);
        for (int64_t i = 0; i < n_in; ++i)
            ASSERT_EQ(m.row(r)[i], ref[static_cast<size_t>(i)]) << "row " << r << ", " << i;
    }
}

// Q5_0 (the embeddings of a Q4_K_M file whose rows are not whole blocks of 256, e.g. Qwen2-0.5B's): decoded by
// plugins/common as the reference dequantizer does.
TEST(spec_heads, a_q5_0_tensor_of_the_target_decodes_as_the_reference_does) {
    const int64_t n_in = 96, n_out = 5;
    const size_t row_bytes = troupe::row_bytes(ggml_type::q5_0, n_in);
    std::vector<uint8_t> bytes(row_bytes * n_out);
    const std::vector<float> values = [&] {
        std::vector<float> v(static_cast<size_t>(n_in * n_out));
        for (size_t i = 0; i < v.size(); ++i)
            v[i] = std::sin(0.37f * static_cast<float>(i)) * (i % 7 == 0 ? 4.0f : 1.0f);
        return v;
    }();
    for (int64_t r = 0; r < n_out; ++r)
        ref::quantize_row_q5_0(values.data() + r * n_in, reinterpret_cast<block_q5_0*>(bytes.data() + r * row_bytes),
                               n_in);
    gguf::gguf_writer w;
    w.set_string("general.architecture", "llama");
    w.add_tensor("token_embd.weight", ggml_type::q5_0, {n_in, n_out}, std::span<const uint8_t>(bytes));
    const std::string path =
        (std::filesystem::temp_directory_path() / ("troupe_q5_0_" + std::to_string(::getpid()) + ".gguf")).string();
    ASSERT_TRUE(w.write(path).ok());
    auto file = gguf::gguf_file::open(path);
    std::filesystem::remove(path);
    ASSERT_TRUE(file.ok()) << file.message();
    auto services = make_model_services(*file);
    auto m =
        spec_common::float_matrix::read(*services, services->model, "q5_0 file", "token_embd.weight", {n_in, n_out});
    std::vector<float> ref(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < n_out; ++r) {
        ref::dequantize_row_q5_0(reinterpret_cast<const block_q5_0*>(bytes.data() + r * row_bytes), ref.data(), n_in);
        for (int64_t i = 0; i < n_in; ++i)
            ASSERT_EQ(m.row(r)[i], ref[static_cast<size_t>(i)]) << "row " << r << ", " << i;
    }
}

}  // namespace
}  // namespace troupe
