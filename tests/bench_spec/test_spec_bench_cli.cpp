// `troupe bench --spec ngram` on stories260K end to end: both runs, the greedy identity check, the figures.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "tests/common/shared_data.h"

namespace troupe {
namespace {

struct run_result {
    int rc = -1;
    std::string out;
};

std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

run_result troupe(const std::vector<std::string>& args) {
    std::string cmd = quote(TROUPE_BIN);
    for (const auto& a : args) cmd += " " + quote(a);
    cmd += " 2>&1";
    run_result r;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int status = ::pclose(p);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

double figure(const std::string& out, const std::string& pattern) {
    std::smatch m;
    if (!std::regex_search(out, m, std::regex(pattern))) return -1;
    return std::stod(m[1].str());
}

TEST(bench_spec, ngram_on_stories260k_reports_identical_greedy_text_acceptance_and_the_predicted_speed_up) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(prompts, "text/prompts.txt");
    const run_result r = troupe({"bench", "--model", model, "--spec", "ngram", "--prompts", prompts, "--n-prompts", "3",
                                 "--n-gen", "48", "--reps", "1", "--threads", "1", "--log-level", "warn"});
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("greedy output  identical with and without spec/ngram on all 3 prompts"), std::string::npos)
        << r.out;
    const double tau = figure(r.out, R"(tau = ([0-9.]+) tokens per target step)");
    EXPECT_GE(tau, 1.0) << r.out;  // at least the target's own token per step
    const double speedup = figure(r.out, R"(speed-up +([0-9.]+)x measured)");
    const double predicted = figure(r.out, R"(predicted ([0-9.]+)x)");
    EXPECT_GT(speedup, 0) << r.out;
    EXPECT_GT(predicted, 0) << r.out;
    EXPECT_NE(r.out.find("P(accepted path reaches k | drafted to depth k): 1:"), std::string::npos) << r.out;
}

TEST(bench_spec, an_unknown_spec_plugin_is_refused_with_its_name) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    const run_result r =
        troupe({"bench", "--model", model, "--spec", "no_such_drafter", "--n-gen", "8", "--reps", "1"});
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("no_such_drafter"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace troupe
