// A plugin that fills its descriptor's taps table observes the graph's taps through the loader like any plugin
// (plugin_tap_sink, several through tap_fanout): the fixture tap_probe (a spec plugin) reports through propose what
// it saw; its refusal fails the step with its message.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "core/loader/model_loader.h"
#include "core/model/tap_fanout.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"

namespace troupe {
namespace {

result<loaded_model> load_with_probe(const std::string& path, const std::string& params = "{}") {
    engine_config c = testing::golden_config(path, testing::golden_setup::builtin_float);
    c.plugins.spec = plugin_config("tapprobe");
    c.plugins.spec.path = TROUPE_TAP_PROBE;
    c.plugins.spec.params = YAML::Load(params);
    return load_model(c);
}

TEST(plugin_taps, a_loaded_plugin_observes_the_taps_it_wants_through_the_abi) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto m = load_with_probe(path);
    ASSERT_TRUE(m.ok()) << m.message();
    ASSERT_NE(m->spec, nullptr);
    forward_output out;
    // Sequence 5: three tokens at positions 0..2 in one step.
    ASSERT_TRUE(m->runner->forward(forward_batch{{sequence_step{5, {1, 403, 407}, 0, {0}}}}, out).ok());
    const std::vector<int32_t> context = {1, 403, 407};
    auto seen = propose_chain(*m->spec, context, 6);
    ASSERT_TRUE(seen.ok()) << seen.message();
    // layer_out of each of the 5 layers, logits once; the last layer_out is layer 4's, its last row position 2 of
    // sequence 5; the logits rows are the vocabulary wide (reported as the last token id, 511).
    EXPECT_EQ(*seen, (std::vector<int32_t>{5, 1, 4, 2, 5, 511}));
}

TEST(plugin_taps, a_plugin_refusing_an_observation_fails_the_step_with_its_message) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto m = load_with_probe(path, "{fail_at: 3}");
    ASSERT_TRUE(m.ok()) << m.message();
    forward_output out;
    const status st = m->runner->forward(forward_batch{{sequence_step{0, {1, 403}, 0, {0}}}}, out);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.message(), "plugin spec/tapprobe: observe failed: refused observation 3");
}

// Records the taps it sees (tap, layer).
class recorder final : public tap_sink {
public:
    explicit recorder(uint64_t wanted) : wanted_(wanted) {}
    uint64_t wanted() const override { return wanted_; }
    status observe(const tap_data& d) override {
        seen.emplace_back(d.tap, d.layer);
        return {};
    }
    std::vector<std::pair<tap_point, int32_t>> seen;

private:
    uint64_t wanted_;
};

TEST(plugin_taps, a_fanout_hands_each_sink_only_the_taps_it_wants) {
    auto a = std::make_shared<recorder>(tap_bit(tap_point::q));
    auto b = std::make_shared<recorder>(tap_bit(tap_point::q) | tap_bit(tap_point::logits));
    tap_fanout f({a, b});
    EXPECT_EQ(f.wanted(), tap_bit(tap_point::q) | tap_bit(tap_point::logits));
    const float x[2] = {1, 2};
    const int64_t seq[1] = {0};
    const int32_t pos[1] = {0};
    ASSERT_TRUE(f.observe(tap_data{tap_point::q, 3, 1, 2, x, seq, pos}).ok());
    ASSERT_TRUE(f.observe(tap_data{tap_point::logits, -1, 1, 2, x, seq, pos}).ok());
    EXPECT_EQ(a->seen, (std::vector<std::pair<tap_point, int32_t>>{{tap_point::q, 3}}));
    EXPECT_EQ(b->seen, (std::vector<std::pair<tap_point, int32_t>>{{tap_point::q, 3}, {tap_point::logits, -1}}));
}

}  // namespace
}  // namespace troupe
