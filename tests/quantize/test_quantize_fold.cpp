// quantize_groups + write_quantized_gguf with a test method that writes W·diag(s) exactly (F32) and AWQ-style input
// scales s: once the host has folded 1/s into the norms and the preceding linears, the written model computes the
// logits of the original (float rounding only). The calibration run hands the method every window's taps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "core/loader/model_loader.h"
#include "core/model/compute_context.h"
#include "core/plugin_host/plugin_host.h"
#include "core/quantize/quantize_run.h"
#include "kernels/ref/quants.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"

namespace troupe {
namespace {

// Scales input channels by s (a pattern far from 1) and writes the scaled weight as F32.
class scaling_method final : public quantize_method {
public:
    std::string name() const override { return "scaling"; }
    uint64_t wanted() const override { return tap_bit(tap_point::ffn_hidden) | tap_bit(tap_point::output_norm); }
    status observe(const tap_data& d) override {
        rows_seen[d.tap] += d.n_rows;
        return {};
    }
    bool can_write(ggml_type type, int64_t) override { return type == ggml_type::f32; }
    status quantize_group(const linear_group& g, const parallel_for_fn&) override {
        std::vector<float> s(g.n_in, 1.0f);
        if (g.input_scales) {
            for (int64_t i = 0; i < g.n_in; ++i) s[i] = g.input_scales[i] = bad_scale ? 0.0f : 0.5f + 0.25f * (i % 7);
        }
        for (const quantize_weight& w : g.weights) {
            float* out = reinterpret_cast<float*>(w.out);
            for (int64_t r = 0; r < w.n_out; ++r) {
                for (int64_t i = 0; i < g.n_in; ++i) out[r * g.n_in + i] = w.data[r * g.n_in + i] * s[i];
            }
        }
        ++n_groups;
        return {};
    }
    std::map<tap_point, int64_t> rows_seen;
    int n_groups = 0;
    bool bad_scale = false;
};

std::string temp_gguf(const std::string& name) {
    return "/tmp/troupe_quantize_" + std::to_string(::getpid()) + "_" + name + ".gguf";
}

std::vector<float> logits_of(const std::string& path, const std::vector<int32_t>& tokens) {
    auto m = load_model(testing::golden_config(path, testing::golden_setup::builtin_float));
    EXPECT_TRUE(m.ok()) << m.message();
    if (!m.ok()) return {};
    forward_output out;
    sequence_step s{0, tokens, 0, {0, 1}, true};
    EXPECT_TRUE(m->runner->forward(forward_batch{{s}}, out).ok());
    return out.logits;
}

TEST(quantize_fold, folded_input_scales_leave_the_logits_of_the_original_model) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto file = gguf::gguf_file::open(path);
    ASSERT_TRUE(file.ok()) << file.message();
    auto model = f32_model::load(*file);
    ASSERT_TRUE(model.ok()) << model.message();
    scaling_method method;
    auto plan = make_quantize_plan(model->hparams(), model->tied_output(), ggml_type::f32, method.name(),
                                   [&](ggml_type t, int64_t n) { return method.can_write(t, n); });
    ASSERT_TRUE(plan.ok()) << plan.message();
    EXPECT_EQ(plan->n_fallback, 0);

    // Calibration: 3 windows of 32 tokens hand the method every row of the taps it wants.
    plugin_host host;
    auto attention = host.load_attention("gqa");
    ASSERT_TRUE(attention.ok()) << attention.message();
    std::vector<int32_t> tokens;
    for (int32_t i = 0; i < 100; ++i) tokens.push_back(1 + (i * 37) % 511);
    calibration_options o;
    o.n_ctx = 32;
    o.bos = 1;
    std::shared_ptr<quantize_method> sink(&method, [](quantize_method*) {});
    int32_t windows = 0;
    ASSERT_TRUE(calibrate(*model, *attention, sink, tokens, o, [&](int32_t w, int32_t) { windows = w; }).ok());
    EXPECT_EQ(windows, 3);
    EXPECT_EQ(method.rows_seen[tap_point::ffn_hidden], 3 * 32 * model->hparams().n_layers);
    EXPECT_EQ(method.rows_seen[tap_point::output_norm], 3 * 32);

    const std::vector<float> norm_before(model->tensor("blk.2.ffn_norm.weight"),
                                         model->tensor("blk.2.ffn_norm.weight") + model->hparams().dim);
    cpu::thread_pool pool(1);
    const compute_context ctx = compute_context::over(pool);
    auto q = quantize_groups(*model, *plan, method, ctx.parallel_for, nullptr);
    ASSERT_TRUE(q.ok()) << q.message();
    EXPECT_EQ(method.n_groups, 21);
    const std::string out = temp_gguf("fold");
    ASSERT_TRUE(write_quantized_gguf(*model, *plan, *q, method.name(), out).ok());

    auto written = gguf::gguf_file::open(out);
    ASSERT_TRUE(written.ok()) << written.message();
    EXPECT_EQ((*written)->string_or("troupe.quantize.method", ""), "scaling");
    EXPECT_EQ((*written)->uint_or("general.quantization_version", 0), 2u);
    const float* norm_after = reinterpret_cast<const float*>((*written)->find_tensor("blk.2.ffn_norm.weight")->data);
    EXPECT_FLOAT_EQ(norm_after[1], norm_before[1] / 0.75f);  // the scales were folded, not dropped
    const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 90, 17, 300};
    const std::vector<float> want = logits_of(path, prompt), got = logits_of(out, prompt);
    ASSERT_EQ(want.size(), got.size());
    float worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(want[i] - got[i]));
    EXPECT_LT(worst, 1e-3f);
    std::remove(out.c_str());
}

TEST(quantize_fold, with_as_many_kv_heads_as_heads_attn_output_scales_fold_into_attn_v_and_keep_the_logits) {
    TROUPE_REQUIRE_SHARED(path, "models/llama-2-tiny-random.gguf");  // 2 heads, 2 kv heads, dim 8, F16
    auto file = gguf::gguf_file::open(path);
    ASSERT_TRUE(file.ok()) << file.message();
    auto model = f32_model::load(*file);
    ASSERT_TRUE(model.ok()) << model.message();
    scaling_method method;
    auto plan = make_quantize_plan(model->hparams(), model->tied_output(), ggml_type::f32, method.name(),
                                   [](ggml_type, int64_t) { return true; });
    ASSERT_TRUE(plan.ok()) << plan.message();
    ASSERT_EQ(plan->groups[1].fold_into, "blk.0.attn_v.weight");
    auto q = quantize_groups(*model, *plan, method, nullptr, nullptr);
    ASSERT_TRUE(q.ok()) << q.message();
    const std::string out = temp_gguf("fold_mha");
    ASSERT_TRUE(write_quantized_gguf(*model, *plan, *q, method.name(), out).ok());
    const std::vector<int32_t> prompt = {1, 15043, 3186, 29892, 920, 526};
    const std::vector<float> want = logits_of(path, prompt), got = logits_of(out, prompt);
    ASSERT_EQ(want.size(), got.size());
    float worst = 0, largest = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        worst = std::max(worst, std::fabs(want[i] - got[i]));
        largest = std::max(largest, std::fabs(want[i]));
    }
    EXPECT_LT(worst, 1e-4f * std::max(1.0f, largest));
    std::remove(out.c_str());
}

TEST(quantize_fold, a_scale_that_cannot_be_folded_fails_the_group_with_its_channel) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto file = gguf::gguf_file::open(path);
    ASSERT_TRUE(file.ok());
    auto model = f32_model::load(*file);
    ASSERT_TRUE(model.ok());
    scaling_method method;
    method.bad_scale = true;
    auto plan = make_quantize_plan(model->hparams(), model->tied_output(), ggml_type::f32, method.name(),
                                   [](ggml_type, int64_t) { return true; });
    ASSERT_TRUE(plan.ok());
    auto q = quantize_groups(*model, *plan, method, nullptr, nullptr);
    ASSERT_FALSE(q.ok());
    EXPECT_EQ(q.message(),
              "method scaling wrote input scale 0.000000 for channel 0 of blk.0.ffn_down.weight (scales must be "
              "finite and positive)");
}

// Round to nearest Q4_0 (kernels/ref) and a record of the ffn_hidden rows it saw per layer.
class recording_rtn final : public quantize_method {
public:
    std::string name() const override { return "recording_rtn"; }
    uint64_t wanted() const override { return tap_bit(tap_point::ffn_hidden) | tap_bit(tap_point::output_norm); }
    status observe(const tap_data& d) override {
        rows[d.layer] += d.n_rows;
        if (first_value.count(d.layer) == 0) first_value[d.layer] = std::vector<float>(d.data, d.data + d.width);
        return {};
    }
    bool can_write(ggml_type type, int64_t) override { return type == ggml_type::q4_0; }
    status quantize_group(const linear_group& g, const parallel_for_fn&) override {
        for (const quantize_weight& w : g.weights) {
            const size_t row = row_bytes(w.type, g.n_in);
            for (int64_t r = 0; r < w.n_out; ++r)
                ref::quantize_row(w.type, w.data + r * g.n_in, w.out + r * row, g.n_in);
        }
        return {};
    }
    std::map<int32_t, int64_t> rows;
    std::map<int32_t, std::vector<float>> first_value;  // the first ffn_hidden row each layer saw
};

TEST(quantize_run, sequential_calibration_observes_each_layer_once_with_the_layers_before_it_quantized) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto file = gguf::gguf_file::open(path);
    ASSERT_TRUE(file.ok());
    plugin_host host;
    auto attention = host.load_attention("gqa");
    ASSERT_TRUE(attention.ok()) << attention.message();
    std::vector<int32_t> tokens;
    for (int32_t i = 0; i < 64; ++i) tokens.push_back(1 + (i * 53) % 511);
    std::map<bool, recording_rtn> seen;
    std::map<bool, quantized_tensors> written;
    for (bool sequential : {false, true}) {
        auto model = f32_model::load(*file);
        ASSERT_TRUE(model.ok());
        recording_rtn& method = seen[sequential];
        auto plan = make_quantize_plan(model->hparams(), model->tied_output(), ggml_type::q4_0, method.name(),
                                       [](ggml_type, int64_t) { return true; });
        ASSERT_TRUE(plan.ok());
        quantize_run_options o;
        o.calibration.n_ctx = 32;
        o.sequential = sequential;
        int32_t passes = 0;
        quantize_progress progress;
        progress.window = [&](int32_t, int32_t n_passes, int32_t, int32_t) { passes = n_passes; };
        auto q = run_quantization(*model, *plan, method, *attention, tokens, o, nullptr, progress);
        ASSERT_TRUE(q.ok()) << q.message();
        written[sequential] = std::move(*q);
        EXPECT_EQ(passes, sequential ? 6 : 1);  // five layers and the output, or one run
    }
    for (int32_t layer : {0, 1, 2, 3, 4, -1}) {
        SCOPED_TRACE("layer " + std::to_string(layer));
        EXPECT_EQ(seen[false].rows[layer], 2 * 32);  // two windows, each row once
        EXPECT_EQ(seen[true].rows[layer], 2 * 32);
    }
    // Layer 0's input is the embedding either way; later layers' differ once the layers before are Q4_0.
    EXPECT_EQ(seen[false].first_value[0], seen[true].first_value[0]);
    EXPECT_NE(seen[false].first_value[3], seen[true].first_value[3]);
    // Round to nearest does not depend on the activations: both runs write the same bytes.
    EXPECT_EQ(written[false], written[true]);
}

}  // namespace
}  // namespace troupe
