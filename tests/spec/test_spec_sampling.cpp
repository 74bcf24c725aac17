// Exactness of every spec plugin, sampling: on stories260K at temperature 1 (no truncation), the first two tokens
// after a fixed prompt, drawn 100,000 times with the plugin's drafts verified by speculative sampling, follow the
// target's exact joint distribution p(t0) p(t1 | t0) (Pearson's chi-square, p > 0.001; bins expected below 5
// pooled). Drafts run from the prompt's own step with full trees (the rows' trees are small, so that 100,000 draws
// stay quick), so t0 and t1 come from root candidates, accepted paths, residual draws and a second step after the
// plugin heard the outcome. p is computed from the target's logits with the sampler's own distribution; each draw is
// a sequence seeded with its index, on the prompt's KV written once.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdlib>

#include "core/gguf/gguf_file.h"
#include "core/loader/model_loader.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"
#include "tests/sampling/chi_square.h"
#include "tests/spec/spec_driver.h"
#include "tests/spec/spec_plugin_table.h"

namespace troupe {
namespace {

using testing::driven_sequence;
using testing::spec_plugin_rows;

// 100,000 draws; TROUPE_SPEC_DRAWS asks for more (a stronger check, or a second look at a low p-value).
int64_t draws_wanted() {
    const char* env = std::getenv("TROUPE_SPEC_DRAWS");
    return std::max<int64_t>(100000, env != nullptr ? std::atoll(env) : 0);
}
constexpr int32_t max_running = 64;
// Repeats itself with two endings, so that text n-grams propose trees of what the target often samples.
constexpr const char* prompt_text =
    "Tom and Sue went to the park. Tom and Sue went to the shop. Tom and Sue went to the";

sampling_params plain_sampling(uint64_t seed) {
    sampling_params p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

// The target's exact joint distribution of the first two tokens: [n_vocab * n_vocab], t0 * n_vocab + t1.
result<std::vector<double>> exact_joint(model_runner& runner, const std::vector<int32_t>& prompt, int32_t n_shared,
                                        const std::vector<int32_t>& shared_blocks, std::vector<int32_t> own_blocks) {
    const int32_t n_vocab = runner.n_vocab();
    sampler smp(plain_sampling(0));
    std::vector<float> p;
    auto run = [&](const std::vector<std::vector<int32_t>>& extra, forward_output& out) -> status {
        forward_batch batch;
        const size_t per_seq = own_blocks.size() / extra.size();
        for (size_t i = 0; i < extra.size(); ++i) {
            sequence_step s{static_cast<int64_t>(1000000 + i), {}, n_shared, shared_blocks};
            s.tokens.assign(prompt.begin() + n_shared, prompt.end());
            s.tokens.insert(s.tokens.end(), extra[i].begin(), extra[i].end());
            s.block_table.insert(s.block_table.end(), own_blocks.begin() + i * per_seq,
                                 own_blocks.begin() + (i + 1) * per_seq);
            batch.seqs.push_back(std::move(s));
        }
        return runner.forward(batch, out);
    };
    forward_output out;
    if (status st = run({{}}, out); !st.ok()) return st.err();
    smp.distribution(out.row(0), prompt, p);
    const std::vector<float> p0 = p;
    std::vector<double> joint(static_cast<size_t>(n_vocab) * n_vocab, 0.0);
    constexpr int32_t group = 16;
    for (int32_t t0 = 0; t0 < n_vocab; t0 += group) {
        std::vector<std::vector<int32_t>> extra;
        for (int32_t t = t0; t < std::min(n_vocab, t0 + group); ++t) extra.push_back({t});
        if (status st = run(extra, out); !st.ok()) return st.err();
        for (size_t i = 0; i < extra.size(); ++i) {
            std::vector<int32_t> history = prompt;
            history.push_back(extra[i][0]);
            smp.distribution(out.row(i), history, p);
            for (int32_t t1 = 0; t1 < n_vocab; ++t1) {
                joint[static_cast<size_t>(extra[i][0]) * n_vocab + t1] =
                    static_cast<double>(p0[static_cast<size_t>(extra[i][0])]) * p[static_cast<size_t>(t1)];
            }
        }
    }
    return joint;
}

class spec_sampling : public ::testing::TestWithParam<size_t> {};

TEST_P(spec_sampling, the_first_two_tokens_follow_the_target_distribution_over_100000_draws) {
    const testing::spec_plugin_row& row = spec_plugin_rows()[GetParam()];
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    std::string library;
    if (!testing::spec_plugin_built(row.plugin, library)) {
        GTEST_SKIP() << "spec/" << row.plugin << " is not built (no " << library << ")";
    }
    const testing::spec_params sp = row.params(model_path);
    if (!sp.applies) GTEST_SKIP() << "spec/" << row.plugin << " on stories260K: " << sp.why_not;
    const auto t_start = std::chrono::steady_clock::now();

    engine_config config = testing::golden_config(model_path);
    config.scheduler.max_running_seqs = max_running + 16;
    // One-token blocks: the shared prefix is the whole prompt but its last token, so each draw's first step runs one
    // token and its drafts.
    config.kv.block_size = 1;
    config.plugins.spec = plugin_config(row.plugin);
    config.plugins.spec.params = YAML::Load(sp.yaml);
    auto m = load_model(config);
    ASSERT_TRUE(m.ok()) << m.message();
    const std::vector<int32_t> prompt = m->tok->encode(prompt_text, true);
    std::shared_ptr<model_runner> runner(std::move(m->runner));
    testing::spec_driver driver(runner, m->spec);
    const int32_t bs = driver.block_size();
    const int32_t n_shared = (static_cast<int32_t>(prompt.size()) - 1) / bs * bs;
    ASSERT_GT(n_shared, 0) << "the prompt is shorter than a KV block";
    auto shared = driver.prefill_shared(std::span<const int32_t>(prompt.data(), static_cast<size_t>(n_shared)));
    ASSERT_TRUE(shared.ok()) << shared.message();

    // The exact distribution, on the pool's last blocks (the driver hands out the lowest free ones first and needs
    // far fewer than the pool holds).
    const int32_t n_vocab = runner->n_vocab();
    std::vector<int32_t> scratch;
    for (int32_t b = 0; b < 16 * 4; ++b) scratch.push_back(runner->kv().n_blocks - 1 - b);
    auto joint = exact_joint(*runner, prompt, n_shared, **shared, scratch);
    ASSERT_TRUE(joint.ok()) << joint.message();

    const int64_t n_draws = draws_wanted();
    std::vector<driven_sequence> draws(static_cast<size_t>(n_draws));
    for (int64_t d = 0; d < n_draws; ++d) {
        driven_sequence& s = draws[static_cast<size_t>(d)];
        s.prompt = prompt;
        s.params = plain_sampling(static_cast<uint64_t>(d) + 1);
        s.n_new = 2;
        s.shared_blocks = *shared;
        s.n_shared = n_shared;
        s.drafts_on_first_step = true;
        s.drafts_within_n_new = false;
        s.max_draft = row.sampling_max_draft;
    }
    testing::drive_stats stats;
    ASSERT_TRUE(driver.run(draws, max_running, stats).ok());

    std::vector<double> observed(joint->size(), 0.0), expected(joint->size());
    for (const driven_sequence& s : draws)
        observed[static_cast<size_t>(s.generated[0] * n_vocab + s.generated[1])] += 1;
    for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<double>(n_draws) * (*joint)[i];
    const testing::chi_square_result r = testing::chi_square(observed, expected);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::printf(
        "[ spec    ] %-16s chi-square %.1f, %d dof, p = %.3f; %lld sequence-steps, %lld of %lld draft nodes "
        "accepted; %.1f s\n",
        row.label.c_str(), r.statistic, r.dof, r.p_value, static_cast<long long>(stats.n_seq_steps),
        static_cast<long long>(stats.n_accepted), static_cast<long long>(stats.n_draft_nodes), seconds);
    EXPECT_GT(r.p_value, 0.001) << "chi-square " << r.statistic << " with " << r.dof << " degrees of freedom";
    // The drafts must matter: many draws take accepted draft tokens.
    EXPECT_GT(stats.n_accepted, n_draws / 10) << "drafts were hardly ever accepted: the test checks little";
}

std::vector<size_t> sampling_rows() {
    std::vector<size_t> out;
    for (size_t r = 0; r < spec_plugin_rows().size(); ++r) {
        if (spec_plugin_rows()[r].sampling) out.push_back(r);
    }
    return out;
}

INSTANTIATE_TEST_SUITE_P(plugins, spec_sampling, ::testing::ValuesIn(sampling_rows()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                             return spec_plugin_rows()[info.param].label;
                         });

}  // namespace
}  // namespace troupe
