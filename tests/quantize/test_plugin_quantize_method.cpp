// The plugin adapters of offline quantization (core/plugin_host): plugin_quantize_method and plugin_tap_sink carry
// a quant plugin's quantize and taps tables through the ABI, refuse a plugin without them, and turn a plugin's
// failure into one message that names the plugin and the op.
#include <gtest/gtest.h>

#include "core/plugin_host/plugin_host.h"
#include "core/plugin_host/plugin_quantize_method.h"
#include "core/plugin_host/plugin_tap_sink.h"

namespace troupe {
namespace {

std::shared_ptr<plugin_instance> load_quant(const char* name) {
    plugin_host host;
    auto p = host.load(plugin_kind::quant, name);
    EXPECT_TRUE(p.ok()) << p.message();
    return p.ok() ? p->instance : nullptr;
}

TEST(plugin_quantize_method, a_runtime_only_quant_plugin_is_no_method_and_observes_no_taps) {
    auto q8 = load_quant("q8");
    ASSERT_NE(q8, nullptr);
    auto method = plugin_quantize_method::create(q8);
    ASSERT_FALSE(method.ok());
    EXPECT_EQ(method.message(),
              "plugin quant/q8 is no offline quantization method (its descriptor has no quantize op table)");
    auto taps = plugin_tap_sink::create(q8);
    ASSERT_FALSE(taps.ok());
    EXPECT_EQ(taps.message(), "plugin quant/q8 observes no taps (no taps op table)");
}

TEST(plugin_quantize_method, observations_and_groups_cross_the_abi_and_failures_name_plugin_and_op) {
    auto gptq = load_quant("gptq");
    ASSERT_NE(gptq, nullptr);
    auto method = plugin_quantize_method::create(gptq);
    ASSERT_TRUE(method.ok()) << method.message();
    EXPECT_EQ((*method)->name(), "gptq");
    // GPTQ calibrates from the input of every linear.
    for (tap_point t : {tap_point::attn_norm, tap_point::attn_out, tap_point::ffn_norm, tap_point::ffn_hidden}) {
        EXPECT_NE((*method)->wanted() & tap_bit(t), 0u) << tap_name(t);
    }
    EXPECT_TRUE((*method)->can_write(ggml_type::q4_0, 64));
    EXPECT_FALSE((*method)->can_write(ggml_type::q4_0, 40));  // not whole blocks of 32

    // A group whose input was never observed: the plugin's refusal, prefixed with plugin and op.
    std::vector<float> w(32 * 32, 0.5f);
    std::vector<uint8_t> out(32 * row_bytes(ggml_type::q4_0, 32));
    linear_group g{
        0, tap_point::attn_norm, 32, {{"blk.0.attn_q.weight", w.data(), 32, ggml_type::q4_0, out.data()}}, nullptr};
    const status unobserved = (*method)->quantize_group(g, nullptr);
    ASSERT_FALSE(unobserved.ok());
    EXPECT_EQ(unobserved.message().rfind("plugin quant/gptq: quantize_group failed: ", 0), 0u) << unobserved.message();

    // Rows observed through the tap adapter (with their sequences and positions) make the group quantizable.
    std::vector<float> x(4 * 32);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 11) - 5.0f;
    const int64_t seqs[4] = {3, 3, 3, 3};
    const int32_t positions[4] = {0, 1, 2, 3};
    ASSERT_TRUE((*method)->observe(tap_data{tap_point::attn_norm, 0, 4, 32, x.data(), seqs, positions}).ok());
    const status quantized = (*method)->quantize_group(g, nullptr);
    EXPECT_TRUE(quantized.ok()) << quantized.message();
    const status narrower = (*method)->observe(tap_data{tap_point::ffn_norm, 1, 1, 32, x.data(), seqs, positions});
    ASSERT_TRUE(narrower.ok());
    const status changed = (*method)->observe(tap_data{tap_point::ffn_norm, 1, 1, 16, x.data(), seqs, positions});
    ASSERT_FALSE(changed.ok());
    EXPECT_EQ(changed.message().rfind("plugin quant/gptq: observe failed: ", 0), 0u) << changed.message();
}

}  // namespace
}  // namespace troupe
