// `troupe perplexity` end to end on stories260K and ../shared/text/stories.txt at context 256, against the figures
// of the independent reference named in issue 8 (F32 10.90, Q8_0 10.96, Q4_0 12.75), and its error paths.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/shared_data.h"

namespace troupe {
namespace {

struct run_result {
    int rc;
    std::string out;
    std::string err;
};

std::string temp_path(const std::string& name) {
    return (::testing::TempDir().empty() ? std::string("/tmp/") : ::testing::TempDir()) + "troupe_ppl_" +
           std::to_string(::getpid()) + "_" + name;
}

std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// Runs `troupe perplexity <args>`; each argument is shell-quoted.
run_result troupe_perplexity(const std::vector<std::string>& args) {
    std::string cmd = quote(TROUPE_BIN) + " perplexity";
    for (const auto& a : args) cmd += " " + quote(a);
    const std::string err_path = temp_path("stderr");
    cmd += " 2>" + quote(err_path);
    run_result r{};
    FILE* p = ::popen(cmd.c_str(), "r");
    EXPECT_NE(p, nullptr);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int status = ::pclose(p);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream in(err_path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    r.err = s.str();
    std::remove(err_path.c_str());
    return r;
}

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

struct estimate {
    double ppl = 0, error = 0;
    long long n_scored = 0;
    int n_windows = 0;
};

// "PPL = 10.9012 +/- 0.12345\nscored 9271 tokens in 73 windows of 256 ..."
bool parse_estimate(const std::string& out, estimate& e) {
    const size_t at = out.find("PPL = ");
    if (at == std::string::npos) return false;
    if (std::sscanf(out.c_str() + at, "PPL = %lf +/- %lf", &e.ppl, &e.error) != 2) return false;
    const size_t scored = out.find("scored ", at);
    return scored != std::string::npos &&
           std::sscanf(out.c_str() + scored, "scored %lld tokens in %d windows", &e.n_scored, &e.n_windows) == 2;
}

TEST(perplexity_command, stories260K_matches_the_reference_figures_at_context_256) {
    TROUPE_REQUIRE_SHARED(text, "text/stories.txt");
    struct tcase {
        std::string model;
        std::vector<std::string> extra;
        double reference;  // the independent reference's PPL (issue 8)
        double tolerance;  // relative
    };
    const tcase cases[] = {
        {"models/stories260K.gguf", {}, 10.90, 0.005},
        {"models/stories260K.gguf", {"--set", "kv.dtype=f16"}, 10.90, 0.005},  // an f16 cache changes little
        // The default config runs Q8_0 weights through quant/q8 with float activations (10.904); the reference
        // quantizes the activations to 8-bit blocks as llama.cpp's CPU path does, which the built-in kernels do
        // without a quant plugin (10.955).
        {"models/stories260K-Q8_0.gguf", {}, 10.96, 0.01},
        {"models/stories260K-Q8_0.gguf", {"--set", "plugins.quant.name=none"}, 10.96, 0.01},
        {"models/stories260K-Q4_0.gguf", {}, 12.75, 0.01},
    };
    int n_windows = 0;
    for (const auto& c : cases) {
        TROUPE_REQUIRE_SHARED(model, c.model);
        std::vector<std::string> args{"--model", model, "--file", text, "--ctx", "256", "--threads", "2"};
        args.insert(args.end(), c.extra.begin(), c.extra.end());
        const run_result r = troupe_perplexity(args);
        SCOPED_TRACE(c.model + (c.extra.empty() ? "" : " " + c.extra.back()) + "\nstdout:\n" + r.out + "stderr:\n" +
                     r.err);
        ASSERT_EQ(r.rc, 0);
        estimate e;
        ASSERT_TRUE(parse_estimate(r.out, e));
        EXPECT_NEAR(e.ppl, c.reference, c.tolerance * c.reference);
        // The error bar is the standard error of a mean over thousands of tokens: a few percent of the PPL.
        EXPECT_GT(e.error, 0.001 * e.ppl);
        EXPECT_LT(e.error, 0.1 * e.ppl);
        EXPECT_EQ(e.n_scored, static_cast<long long>(e.n_windows) * 127);
        if (n_windows == 0) n_windows = e.n_windows;
        EXPECT_EQ(e.n_windows, n_windows) << "every format tokenizes the text alike";
        EXPECT_TRUE(contains(r.err, "window 1/" + std::to_string(e.n_windows))) << "progress per window on stderr";
    }
    EXPECT_GE(n_windows, 10);
}

TEST(perplexity_command, windows_run_in_steps_of_a_few_tokens_give_the_same_estimate) {
    // Positions and block tables must carry each window across steps: 16-token and 1-token steps (the KV cache
    // read back for every earlier token) agree with one step per half-window.
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(stories, "text/stories.txt");
    const std::string text = temp_path("stories_head.txt");  // the first stories: a second's worth of 1-token steps
    {
        std::ifstream in(stories, std::ios::binary);
        std::string head(4000, '\0');
        in.read(head.data(), static_cast<std::streamsize>(head.size()));
        head.resize(static_cast<size_t>(in.gcount()));
        std::ofstream(text, std::ios::binary) << head;
    }
    const std::vector<std::string> base{"--model", model, "--file", text, "--ctx", "64", "--threads", "2"};
    const run_result whole = troupe_perplexity(base);
    ASSERT_EQ(whole.rc, 0) << whole.err;
    estimate expected;
    ASSERT_TRUE(parse_estimate(whole.out, expected)) << whole.out;
    for (const std::string budget : {"16", "1"}) {
        std::vector<std::string> args = base;
        for (const std::string& kv :
             std::vector<std::string>{"scheduler.max_running_seqs=1", "scheduler.max_batched_tokens=" + budget}) {
            args.push_back("--set");
            args.push_back(kv);
        }
        const run_result r = troupe_perplexity(args);
        ASSERT_EQ(r.rc, 0) << r.err;
        estimate e;
        ASSERT_TRUE(parse_estimate(r.out, e)) << r.out;
        EXPECT_NEAR(e.ppl, expected.ppl, 1e-4 * expected.ppl) << "steps of " << budget;
        EXPECT_EQ(e.n_scored, expected.n_scored);
    }
    EXPECT_GE(expected.n_windows, 20);
    std::remove(text.c_str());
}

TEST(perplexity_command, help_lists_its_flags) {
    const run_result r = troupe_perplexity({"--help"});
    EXPECT_EQ(r.rc, 0);
    for (const std::string flag : {"--model", "--file", "--ctx", "--threads", "--config", "--set"}) {
        EXPECT_TRUE(contains(r.out, flag)) << "help lacks " << flag << ":\n" << r.out;
    }
}

TEST(perplexity_command, a_text_too_short_or_a_bad_context_fails_with_one_clear_message_and_exit_code_1) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(text, "text/stories.txt");
    const std::string short_text = temp_path("short.txt");
    {
        std::ofstream f(short_text);
        f << "Once upon a time, there was a little girl named Lily.\n";
    }
    struct tcase {
        std::string file;
        std::string ctx;
        std::string message_part;
    };
    const tcase cases[] = {
        {short_text, "256", "shorter than one window of 256: give a longer text or a smaller context"},
        {text, "4096", "--ctx 4096 exceeds the model's context of 2048"},
        {text, "2", "--ctx 2: must be at least 4"},
        {temp_path("absent.txt"), "256", "cannot open the text file"},
    };
    for (const auto& c : cases) {
        const run_result r = troupe_perplexity({"--model", model, "--file", c.file, "--ctx", c.ctx});
        SCOPED_TRACE(c.file + " --ctx " + c.ctx + "\nstderr:\n" + r.err);
        EXPECT_EQ(r.rc, 1);
        EXPECT_TRUE(contains(r.err, c.message_part));
        EXPECT_FALSE(contains(r.out, "PPL ="));
    }
    std::remove(short_text.c_str());
}

TEST(perplexity_command, a_missing_file_flag_is_a_usage_error) {
    const run_result r = troupe_perplexity({"--ctx", "256"});
    EXPECT_EQ(r.rc, 2);
    EXPECT_TRUE(contains(r.err, "--file is required")) << r.err;
}

}  // namespace
}  // namespace troupe
