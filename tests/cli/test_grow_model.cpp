// grow_model on the real stories260K: grown with noise 0 it computes the source's logits and reproduces its golden
// greedy run; with noise it is a perturbation the source still drafts for; files depend on seed and noise only;
// `troupe synth --grow-from` refuses bad inputs with one clear error.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/grow_model.h"
#include "core/model/greedy.h"
#include "tests/cli/greedy_agreement.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"
#include "tests/golden/golden_runs.h"

namespace troupe::cli {

// gtest prints a shape parameter by its name (found by argument-dependent lookup, so outside the anonymous namespace).
void PrintTo(const synth_shape& s, std::ostream* os) {
    *os << s.name;
}

namespace {

using testing::golden_run;

std::string temp_path(const std::string& name) {
    return (::testing::TempDir().empty() ? std::string("/tmp/") : ::testing::TempDir()) + "troupe_grow_" +
           std::to_string(::getpid()) + "_" + name;
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

golden_run stories_golden_run(const std::string& golden_path) {
    for (const auto& r : testing::load_golden_runs(golden_path)) {
        if (r.model == "stories260K.gguf") return r;
    }
    ADD_FAILURE() << golden_path << " has no run of stories260K.gguf";
    return {};
}

// A grown model written to a temporary file, removed at the end of the test.
struct grown_file {
    std::string path;
    grow_summary summary;
    ~grown_file() { std::remove(path.c_str()); }
};

std::unique_ptr<grown_file> grow(const std::string& source, const synth_shape& shape, float noise, uint64_t seed = 1,
                                 int n_threads = 0) {
    auto f = std::make_unique<grown_file>();
    f->path =
        temp_path(std::string(shape.name) + "_" + std::to_string(seed) + "_" + std::to_string(n_threads) + ".gguf");
    const grow_params p{.shape = shape, .type = ggml_type::f32, .noise = noise, .seed = seed, .n_threads = n_threads};
    auto s = write_grown_model(p, source, f->path);
    EXPECT_TRUE(s.ok()) << s.message();
    if (s.ok()) f->summary = *s;
    return f;
}

float max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float worst = 0.0f;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
    return worst;
}

class grown_stories : public ::testing::TestWithParam<synth_shape> {};

TEST_P(grown_stories, with_zero_noise_gives_the_source_logits_and_the_golden_tokens) {
    TROUPE_REQUIRE_SHARED(source, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(golden_path, "golden/stories260K-greedy.json");
    const golden_run run = stories_golden_run(golden_path);
    const auto grown = grow(source, GetParam(), 0.0f);
    const auto& t = grown->summary.layout.target;
    ASSERT_EQ(t.dim, GetParam().dim);

    auto src_model = testing::load_golden_model(source);
    ASSERT_TRUE(src_model.ok()) << src_model.message();
    auto big_model = testing::load_golden_model(grown->path);
    ASSERT_TRUE(big_model.ok()) << big_model.message();
    const auto n_new = static_cast<int32_t>(run.generated_ids.size());
    auto src = greedy_generate(*src_model->runner, run.prompt_ids, n_new);
    ASSERT_TRUE(src.ok()) << src.message();
    auto big = greedy_generate(*big_model->runner, run.prompt_ids, n_new);
    ASSERT_TRUE(big.ok()) << big.message();

    const float worst = max_abs_difference(src->first_logits, big->first_logits);
    std::printf("  %s: dim %d, %d layers, %d/%d heads of %d, FFN %d: worst |grown - source| first-step logit %.2e\n",
                std::string(GetParam().name).c_str(), t.dim, t.n_layers, t.n_heads, t.n_kv_heads, t.head_dim, t.ffn_dim,
                static_cast<double>(worst));
    EXPECT_LT(worst, 1e-4f);
    EXPECT_EQ(big->tokens, run.generated_ids);

    // Every position, not only the first step: the grown model's argmax is the source's along the golden text.
    std::vector<int32_t> text = run.prompt_ids;
    text.insert(text.end(), run.generated_ids.begin(), run.generated_ids.end());
    auto src_rows = testing::argmax_of_every_row(*src_model->runner, text);
    auto big_rows = testing::argmax_of_every_row(*big_model->runner, text);
    ASSERT_TRUE(src_rows.ok() && big_rows.ok());
    EXPECT_EQ(*big_rows, *src_rows);
}

INSTANTIATE_TEST_SUITE_P(
    shapes, grown_stories,
    ::testing::Values(synth_shape{"same_head_size", 128, 8, 16, 16, 384, 256},   // kv heads copied, 3 identity layers
                      synth_shape{"wider_heads", 128, 8, 8, 8, 384, 512},        // heads of 16: RoPE pairs spread
                      synth_shape{"gqa_wider_heads", 256, 7, 16, 4, 256, 512}),  // GQA groups of 4, heads of 16
    [](const auto& info) { return std::string(info.param.name); });

TEST(grown_stories_noise, changes_the_logits_but_the_source_still_drafts_most_greedy_tokens) {
    TROUPE_REQUIRE_SHARED(source, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(golden_path, "golden/stories260K-greedy.json");
    const golden_run run = stories_golden_run(golden_path);
    const synth_shape shape{"noisy", 128, 8, 16, 16, 384, 256};
    const auto grown = grow(source, shape, 0.3f);
    auto src_model = testing::load_golden_model(source);
    ASSERT_TRUE(src_model.ok()) << src_model.message();
    auto big_model = testing::load_golden_model(grown->path);
    ASSERT_TRUE(big_model.ok()) << big_model.message();

    auto src = greedy_generate(*src_model->runner, run.prompt_ids, 1);
    auto big = greedy_generate(*big_model->runner, run.prompt_ids, 1);
    ASSERT_TRUE(src.ok() && big.ok());
    const float worst = max_abs_difference(src->first_logits, big->first_logits);
    EXPECT_GT(worst, 1e-3f) << "noise 0.3 should move the logits";

    auto a = testing::greedy_agreement(*big_model->runner, *src_model->runner, run.prompt_ids, 48);
    ASSERT_TRUE(a.ok()) << a.message();
    std::printf("  noise 0.3: worst first-step logit difference %.3f, stories260K drafts %d of 48 greedy tokens\n",
                static_cast<double>(worst), a->n_agree);
    EXPECT_GE(a->rate(), 0.75);
}

TEST(grown_stories_files, depend_on_the_seed_and_the_noise_only) {
    TROUPE_REQUIRE_SHARED(source, "models/stories260K.gguf");
    const synth_shape shape{"seeded", 128, 6, 16, 16, 256, 256};
    const auto one_thread = grow(source, shape, 0.3f, 5, 1);
    const auto two_threads = grow(source, shape, 0.3f, 5, 2);
    const auto other_seed = grow(source, shape, 0.3f, 6, 2);
    const std::string a = read_bytes(one_thread->path);
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == read_bytes(two_threads->path)) << "the thread count changed the file";
    EXPECT_FALSE(a == read_bytes(other_seed->path)) << "another seed gave the same file";
}

// `troupe synth` end to end: the exit code and stderr of a command line.
struct run_result {
    int rc;
    std::string err;
};

run_result troupe_synth(const std::vector<std::string>& args) {
    std::string cmd = std::string("'") + TROUPE_BIN + "' synth";
    for (const auto& a : args) cmd += " '" + a + "'";
    const std::string err_path = temp_path("stderr");
    cmd += " >/dev/null 2>'" + err_path + "'";
    const int status = std::system(cmd.c_str());
    run_result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_bytes(err_path)};
    std::remove(err_path.c_str());
    return r;
}

struct cli_case {
    const char* name;
    std::vector<std::string> args;  // "@shared/" prefixes a path under ../shared
    int rc;
    std::vector<std::string> message_parts;
};

void PrintTo(const cli_case& c, std::ostream* os) {
    *os << c.name;
}

class grow_cli : public ::testing::TestWithParam<cli_case> {};

TEST_P(grow_cli, refuses_a_bad_command_line_with_one_clear_error) {
    const cli_case& c = GetParam();
    std::vector<std::string> args;
    for (const auto& a : c.args) {
        if (a.rfind("@shared/", 0) == 0) {
            TROUPE_REQUIRE_SHARED(path, a.substr(8));
            args.push_back(path);
        } else {
            args.push_back(a);
        }
    }
    const std::string out = temp_path("refused.gguf");
    args.insert(args.end(), {"-o", out});
    const run_result r = troupe_synth(args);
    EXPECT_EQ(r.rc, c.rc) << r.err;
    for (const auto& part : c.message_parts) EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
    EXPECT_FALSE(std::ifstream(out).good()) << "a refused command wrote " << out;
}

INSTANTIATE_TEST_SUITE_P(
    bad_inputs, grow_cli,
    ::testing::Values(cli_case{"missing_file",
                               {"--grow-from", "/nonexistent/model.gguf", "--shape", "110M"},
                               1,
                               {"troupe synth: ", "/nonexistent/model.gguf"}},
                      cli_case{"not_a_llama",
                               {"--grow-from", "@shared/models/arch/tiny-qwen2.gguf", "--shape", "110M"},
                               1,
                               {"tiny-qwen2.gguf: general.architecture is 'qwen2'; --grow-from takes a dense Llama"}},
                      cli_case{"mixture_of_experts",
                               {"--grow-from", "@shared/models/arch/tiny-mixtral.gguf", "--shape", "110M"},
                               1,
                               {"tiny-mixtral.gguf: a mixture-of-experts model"}},
                      cli_case{"shape_smaller_than_the_source",
                               {"--grow-from", "@shared/models/stories260K.gguf", "--shape", "tiny"},
                               1,
                               {"stories260K.gguf: cannot grow into shape tiny", "layers 2 < the source's 5"}},
                      cli_case{"vocab_and_grow_from",
                               {"--grow-from", "@shared/models/stories260K.gguf", "--vocab",
                                "@shared/models/stories260K.gguf", "--shape", "110M"},
                               2,
                               {"--vocab and --grow-from exclude each other"}},
                      cli_case{"noise_without_grow_from",
                               {"--vocab", "@shared/models/stories260K.gguf", "--shape", "tiny", "--noise", "0.1"},
                               2,
                               {"--noise applies only with --grow-from"}},
                      cli_case{"negative_noise",
                               {"--grow-from", "@shared/models/stories260K.gguf", "--shape", "110M", "--noise", "-1"},
                               2,
                               {"--noise: expected a number from 0 to 1, got '-1'"}}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace troupe::cli
