// The host's second-model service (troupe_model_services version 2 over plugin_model_runners) on stories260K and its
// quantized copies: a drafter with another vocabulary is refused with one error naming both files and the first
// difference; model_forward gives the logits of the same model run separately; the KV budget counts the drafter
// (fewer blocks); the model file answers troupe.fingerprint; misuse is refused with a message.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <numeric>

#include "core/gguf/gguf_writer.h"
#include "core/gguf/target_fingerprint.h"
#include "core/loader/model_loader.h"
#include "core/model/kv_layout.h"
#include "core/plugin_host/plugin_host.h"
#include "core/plugin_host/plugin_model_runners.h"
#include "core/plugin_host/plugin_model_services.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

namespace fs = std::filesystem;

struct target {
    std::shared_ptr<const gguf::gguf_file> file;
    std::shared_ptr<const tokenizer> tok;
    llama_weights weights;
};

target open_target(const std::string& path) {
    target t;
    auto f = gguf::gguf_file::open(path);
    EXPECT_TRUE(f.ok()) << f.message();
    t.file = *f;
    auto tok = tokenizer::from_gguf(*t.file);
    EXPECT_TRUE(tok.ok()) << tok.message();
    t.tok = *tok;
    auto w = bind_llama_weights(t.file);
    EXPECT_TRUE(w.ok()) << w.message();
    t.weights = *w;
    return t;
}

// A copy of `from` whose token `id` reads `text`.
std::string with_token_renamed(const gguf::gguf_file& from, int32_t id, const std::string& text,
                               const std::string& path) {
    gguf::gguf_writer w;
    w.copy_metadata(from);
    const gguf::metadata_value* tokens = from.find("tokenizer.ggml.tokens");
    std::vector<std::string> pieces;
    for (const auto& e : tokens->elements) pieces.push_back(std::get<std::string>(e));
    pieces[static_cast<size_t>(id)] = text;
    w.set_string_array("tokenizer.ggml.tokens", pieces);
    for (const gguf::tensor_info& t : from.tensors()) {
        w.add_tensor(t.name, t.type, t.dims, std::span<const uint8_t>(t.data, t.n_bytes));
    }
    EXPECT_TRUE(w.write(path).ok());
    return path;
}

cpu_llama_params runner_params(plugin_host& host, kv_geometry kv) {
    auto attention = host.load_attention("gqa");
    EXPECT_TRUE(attention.ok()) << attention.message();
    cpu_llama_params p;
    p.attention = *attention;
    p.n_threads = 1;
    p.kv = kv;
    p.max_seqs = 2;
    return p;
}

TEST(model_runners, a_drafter_with_another_vocabulary_is_refused_naming_both_files_and_the_first_difference) {
    TROUPE_REQUIRE_SHARED(target_path, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(other_path, "models/llama-2-tiny-random.gguf");
    target t = open_target(target_path);
    plugin_model_runners runners(t.file, t.tok, t.weights.hp.n_vocab, kv_dtype::f32);

    auto other = runners.load(other_path);
    ASSERT_FALSE(other.ok());
    EXPECT_EQ(other.message(), other_path + ": its vocabulary differs from the target's (" + target_path +
                                   "): n_vocab 32000 vs 512; a drafter must use the target's tokenizer");

    // The first token from 100 on that is plain letters (printed as they are) is renamed to "x\n" (printed escaped).
    int32_t id = 100;
    while (!std::all_of(t.tok->token_to_piece(id).begin(), t.tok->token_to_piece(id).end(),
                        [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; })) {
        ++id;
    }
    const std::string renamed = with_token_renamed(
        *t.file, id, "x\n",
        (fs::temp_directory_path() / ("troupe_renamed_" + std::to_string(::getpid()) + ".gguf")).string());
    auto r = runners.load(renamed);
    fs::remove(renamed);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(), renamed + ": its vocabulary differs from the target's (" + target_path + "): token " +
                               std::to_string(id) + " is 'x\\x0a' here and '" + t.tok->token_to_piece(id) +
                               "' in the target; a drafter must use the target's tokenizer");
    EXPECT_EQ(runners.size(), 0u);  // nothing was kept of the refused files
    EXPECT_EQ(runners.kv_bytes_per_token(), 0u);
}

TEST(model_runners, model_forward_gives_the_logits_of_the_same_model_run_separately) {
    TROUPE_REQUIRE_SHARED(target_path, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(draft_path, "models/stories260K-Q8_0.gguf");
    target t = open_target(target_path);
    plugin_host host(plugin_host_options{TROUPE_DEFAULT_PLUGIN_DIR});
    const kv_geometry kv{16, 16};
    auto runners = std::make_shared<plugin_model_runners>(t.file, t.tok, t.weights.hp.n_vocab, kv_dtype::f32);
    auto services = make_model_services(t.file, runners);
    troupe_model* model = nullptr;
    ASSERT_EQ(services->load_model(services->host_ctx, draft_path.c_str(), &model), TROUPE_OK)
        << services->last_error(services->host_ctx);
    troupe_model_info info{};
    ASSERT_EQ(services->model_info(services->host_ctx, model, &info), TROUPE_OK);
    EXPECT_EQ(info.n_vocab, 512);
    EXPECT_EQ(info.n_layers, t.weights.hp.n_layers);
    EXPECT_EQ(info.dim, t.weights.hp.dim);
    EXPECT_EQ(info.kv_bytes_per_token, int64_t{2} * t.weights.hp.n_layers * t.weights.hp.kv_width() * 4);
    EXPECT_GT(info.weight_bytes_per_token, 0);
    ASSERT_TRUE(runners->start(runner_params(host, kv)).ok());

    auto w = bind_llama_weights(*gguf::gguf_file::open(draft_path));
    ASSERT_TRUE(w.ok()) << w.message();
    auto separate = cpu_llama::create(*w, runner_params(host, kv));
    ASSERT_TRUE(separate.ok()) << separate.message();

    // Two sequences in other blocks: a prompt chunk with every row's logits, then one token each (the cache used).
    const std::vector<int32_t> a = {1, 403, 407, 261, 378}, b = {1, 70, 30};
    const std::vector<int32_t> table_a = {3, 5}, table_b = {9};
    auto step = [](int64_t seq, const std::vector<int32_t>& tokens, int32_t pos0, const std::vector<int32_t>& table,
                   bool all) {
        troupe_model_step s{};
        s.struct_size = sizeof s;
        s.version = TROUPE_MODEL_STEP_VERSION;
        s.seq_id = seq;
        s.tokens = tokens.data();
        s.n_tokens = static_cast<int32_t>(tokens.size());
        s.pos0 = pos0;
        s.block_table = table.data();
        s.n_blocks = static_cast<int32_t>(table.size());
        s.all_logits = all ? 1 : 0;
        return s;
    };
    const std::vector<int32_t> next_a = {42}, next_b = {17};
    for (int round = 0; round < 2; ++round) {
        SCOPED_TRACE(round == 0 ? "prompts" : "one token each");
        std::vector<troupe_model_step> steps =
            round == 0 ? std::vector{step(1, a, 0, table_a, true), step(2, b, 0, table_b, false)}
                       : std::vector{step(1, next_a, 5, table_a, false), step(2, next_b, 3, table_b, false)};
        const size_t rows = round == 0 ? a.size() + 1 : 2;
        std::vector<float> logits(rows * 512, -1.0f);
        ASSERT_EQ(services->model_forward(services->host_ctx, model, steps.data(), 2, logits.data()), TROUPE_OK)
            << services->last_error(services->host_ctx);
        forward_batch batch;
        for (const troupe_model_step& s : steps) {
            batch.seqs.push_back(sequence_step{s.seq_id, std::vector<int32_t>(s.tokens, s.tokens + s.n_tokens), s.pos0,
                                               std::vector<int32_t>(s.block_table, s.block_table + s.n_blocks),
                                               s.all_logits != 0});
        }
        forward_output expected;
        ASSERT_TRUE((*separate)->forward(batch, expected).ok());
        ASSERT_EQ(expected.logits.size(), logits.size());
        EXPECT_EQ(expected.logits, logits);
    }
    services->unload_model(services->host_ctx, model);
    EXPECT_EQ(runners->size(), 0u);
}

TEST(model_runners, the_kv_budget_counts_the_drafter_so_the_pool_has_fewer_blocks) {
    TROUPE_REQUIRE_SHARED(target_path, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(draft_path, "models/stories260K-Q8_0.gguf");
    std::vector<int32_t> n_blocks;
    for (bool with_drafter : {false, true}) {
        engine_config config;
        config.model = target_path;
        config.kv.memory = memory_budget{uint64_t{2} << 20, 0.0};
        config.kv.block_size = 16;
        if (with_drafter) {
            config.plugins.spec = plugin_config("draft");
            config.plugins.spec.params["model"] = draft_path;
        }
        auto m = load_model(config);
        ASSERT_TRUE(m.ok()) << m.message();
        n_blocks.push_back(m->runner->kv().n_blocks);
        if (with_drafter) {
            EXPECT_NE(m->kv_summary.find("stories260K-Q8_0.gguf"), std::string::npos) << m->kv_summary;
        }
    }
    // The drafter (a copy of the target's shape) doubles the bytes of a block: half the blocks fit the budget.
    const target t = open_target(target_path);
    const uint64_t block_bytes = uint64_t{16} * 2 * t.weights.hp.kv_width() * sizeof(float);  // one layer
    EXPECT_EQ(n_blocks[0], static_cast<int32_t>((uint64_t{2} << 20) / (t.weights.hp.n_layers * block_bytes)));
    EXPECT_EQ(n_blocks[1], static_cast<int32_t>((uint64_t{2} << 20) / (t.weights.hp.n_layers * 2 * block_bytes)));
    EXPECT_LT(n_blocks[1], n_blocks[0]);
}

TEST(model_runners, the_model_file_answers_troupe_fingerprint) {
    TROUPE_REQUIRE_SHARED(target_path, "models/stories260K.gguf");
    target t = open_target(target_path);
    auto services = make_model_services(t.file);
    const char* fp = nullptr;
    ASSERT_EQ(services->metadata_string(services->host_ctx, services->model, "troupe.fingerprint", &fp), TROUPE_OK)
        << services->last_error(services->host_ctx);
    EXPECT_EQ(std::string(fp), *target_fingerprint(*t.file));
    EXPECT_EQ(std::string(fp).size(), 16u);
}

TEST(model_runners, loading_without_a_loader_or_running_before_the_pool_is_sized_is_refused_with_a_message) {
    TROUPE_REQUIRE_SHARED(target_path, "models/stories260K.gguf");
    target t = open_target(target_path);
    auto bare = make_model_services(t.file);
    troupe_model* model = nullptr;
    EXPECT_EQ(bare->load_model(bare->host_ctx, target_path.c_str(), &model), TROUPE_ERR_UNSUPPORTED);
    EXPECT_EQ(std::string(bare->last_error(bare->host_ctx)),
              "load_model: this host runs no second model here (the plugin was loaded without the engine's model "
              "loader)");

    auto runners = std::make_shared<plugin_model_runners>(t.file, t.tok, t.weights.hp.n_vocab, kv_dtype::f32);
    auto services = make_model_services(t.file, runners);
    ASSERT_EQ(services->load_model(services->host_ctx, target_path.c_str(), &model), TROUPE_OK);
    const std::vector<int32_t> tokens = {1, 2}, table = {0};
    troupe_model_step s{
        sizeof(troupe_model_step), TROUPE_MODEL_STEP_VERSION, 1, tokens.data(), 2, 0, table.data(), 1, 0};
    std::vector<float> logits(512);
    EXPECT_EQ(services->model_forward(services->host_ctx, model, &s, 1, logits.data()), TROUPE_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(services->last_error(services->host_ctx)),
              target_path +
                  ": model_forward before the host started the model (the loader starts it once the KV cache is "
                  "sized; a plugin runs it from propose_batch or accepted)");
}

}  // namespace
}  // namespace troupe
