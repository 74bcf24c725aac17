// The offline quantization methods quant/rtn, quant/gptq and quant/awq, loaded from their built shared objects
// with dlopen and driven through their taps and quantize tables as `troupe quantize` drives them: observe the
// calibration rows of a linear's input, then quantize_group, then decode the written rows with kernels/ref.
//
// Synthetic data where calibration matters: inputs X that are correlated (low rank plus noise) with a few outlier
// channels of large magnitude, as real activations are. The measure is the output error ||(W - Q) X||² on held-out
// rows of the same distribution (for AWQ with its input scales folded as the host folds them: Q·diag(1/s)).
#include <gtest/gtest.h>

#include <troupe/plugin.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ref/quants.h"
#include "tests/plugins/quantize_test_support.h"

namespace {

using namespace troupe::testing::quantize;

class quantize_methods : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        for (const char* name : {"rtn", "gptq", "awq"}) {
            auto lib = std::make_unique<library>(name);
            ASSERT_NE(lib->descriptor, nullptr) << "cannot load quant/" << name << ": " << dlerror();
            libs().emplace(name, std::move(lib));
        }
    }
    static void TearDownTestSuite() { libs().clear(); }
    static std::map<std::string, std::unique_ptr<library>>& libs() {
        static std::map<std::string, std::unique_ptr<library>> l;
        return l;
    }
    static const library& lib(const std::string& name) { return *libs().at(name); }
};

TEST_F(quantize_methods, descriptors_are_quant_kind_with_a_quantize_table_and_no_matmul) {
    for (const auto& [name, l] : libs()) {
        const troupe_plugin_descriptor* d = l->descriptor;
        EXPECT_EQ(d->kind, TROUPE_PLUGIN_KIND_QUANT) << name;
        EXPECT_EQ(d->abi_version, TROUPE_PLUGIN_ABI_VERSION) << name;
        EXPECT_EQ(d->quant, nullptr) << name;
        ASSERT_NE(d->quantize, nullptr) << name;
        EXPECT_NE(d->quantize->can_write, nullptr) << name;
        EXPECT_NE(d->quantize->quantize_group, nullptr) << name;
        ASSERT_NE(d->taps, nullptr) << name;
    }
    method rtn(lib("rtn"), {});
    method gptq(lib("gptq"), {});
    EXPECT_EQ(rtn.d->taps->wanted(rtn.instance), 0u);
    const uint64_t inputs = TROUPE_TAP_BIT(TROUPE_TAP_ATTN_NORM) | TROUPE_TAP_BIT(TROUPE_TAP_ATTN_OUT) |
                            TROUPE_TAP_BIT(TROUPE_TAP_FFN_NORM) | TROUPE_TAP_BIT(TROUPE_TAP_FFN_HIDDEN) |
                            TROUPE_TAP_BIT(TROUPE_TAP_OUTPUT_NORM);
    EXPECT_EQ(gptq.d->taps->wanted(gptq.instance), inputs);
    method awq(lib("awq"), {});
    EXPECT_EQ(awq.d->taps->wanted(awq.instance), inputs);
}

TEST_F(quantize_methods, can_write_takes_the_codec_types_in_whole_blocks_only) {
    struct row {
        uint32_t type;
        int64_t n_in;
        int32_t expected;
    };
    const row table[] = {
        {TROUPE_TYPE_Q8_0, 64, 1},    {TROUPE_TYPE_Q8_0, 48, 0},
        {TROUPE_TYPE_Q4_0, 32, 1},    {TROUPE_TYPE_Q4_1, 96, 1},
        {TROUPE_TYPE_W4_G64, 96, 0},  {TROUPE_TYPE_W4_G64, 128, 1},
        {TROUPE_TYPE_W4_G128, 64, 0}, {TROUPE_TYPE_W4_G128, 256, 1},
        {TROUPE_TYPE_Q4_K, 128, 0},   {TROUPE_TYPE_Q4_K, 512, 1},
        {TROUPE_TYPE_Q6_K, 256, 0},   {TROUPE_TYPE_F32, 64, 0},
        {TROUPE_TYPE_Q4_0, 0, 0},     {12345, 256, 0},
    };
    for (const auto& [name, l] : libs()) {
        method m(*l, {});
        ASSERT_EQ(m.status, TROUPE_OK) << m.error;
        for (const row& r : table)
            EXPECT_EQ(m.d->quantize->can_write(m.instance, r.type, r.n_in), r.expected)
                << name << " " << r.type << " n_in " << r.n_in;
    }
}

TEST_F(quantize_methods, parameters_are_validated_with_messages_that_name_the_key) {
    struct row {
        std::string plugin;
        std::vector<std::pair<std::string, std::string>> params;
        std::string message;  // "" when create must succeed
    };
    const std::vector<row> table = {
        {"rtn", {}, ""},
        {"rtn", {{"group_size", "32"}}, "params.group_size: unknown key (this plugin takes no parameters)"},
        {"gptq", {{"damp", "0.1"}, {"block_size", "64"}, {"act_order", "true"}}, ""},
        {"gptq", {{"damp", "2"}}, "params.damp: must be between 0 and 1, got 2"},
        {"gptq", {{"damp", "lots"}}, "params.damp: must be a number between 0 and 1, got 'lots'"},
        {"gptq", {{"block_size", "0"}}, "params.block_size: must be between 1 and 4096, got 0"},
        {"gptq", {{"act_order", "maybe"}}, "params.act_order: must be true or false, got 'maybe'"},
        {"gptq",
         {{"bits", "4"}},
         "params.bits: unknown key (valid keys: damp, block_size, act_order, clip, scale_inputs)"},
        {"gptq", {{"clip", "false"}, {"act_order", "false"}}, ""},
        {"awq", {{"n_grid", "10"}, {"n_samples", "64"}, {"clip", "false"}}, ""},
        {"awq", {{"n_grid", "0"}}, "params.n_grid: must be between 1 and 100, got 0"},
        {"awq", {{"n_samples", "many"}}, "params.n_samples: must be an integer between 1 and 65536, got 'many'"},
        {"awq", {{"alpha", "0.5"}}, "params.alpha: unknown key (valid keys: n_grid, n_samples, clip)"},
    };
    for (const row& r : table) {
        method m(lib(r.plugin), r.params);
        if (r.message.empty()) {
            EXPECT_EQ(m.status, TROUPE_OK) << r.plugin << ": " << m.error;
        } else {
            EXPECT_EQ(m.status, TROUPE_ERR_INVALID_PARAMS) << r.plugin;
            EXPECT_EQ(m.error, r.message) << r.plugin;
        }
    }
}

TEST_F(quantize_methods, rtn_writes_the_reference_round_to_nearest_rows_and_unit_input_scales) {
    const problem p = make_problem(256, 37, 0, 0, 5);
    for (const troupe_type type :
         {TROUPE_TYPE_Q8_0, TROUPE_TYPE_Q4_0, TROUPE_TYPE_Q4_1, TROUPE_TYPE_W4_G128, TROUPE_TYPE_Q4_K}) {
        method m(lib("rtn"), {});
        const size_t row_bytes = troupe_row_bytes(type, p.n_in);
        std::vector<uint8_t> out(row_bytes * static_cast<size_t>(p.n_out) + 64, 0xAB);  // 64 guard bytes
        std::vector<float> scales(static_cast<size_t>(p.n_in), -1.0f);
        const troupe_quantize_weight weight = {
            sizeof(troupe_quantize_weight), TROUPE_QUANTIZE_WEIGHT_VERSION, "w", p.w.data(), p.n_out, type, out.data()};
        const troupe_quantize_group group = {sizeof(troupe_quantize_group),
                                             TROUPE_QUANTIZE_GROUP_VERSION,
                                             0,
                                             TROUPE_TAP_ATTN_NORM,
                                             p.n_in,
                                             1,
                                             &weight,
                                             scales.data()};
        ASSERT_EQ(m.d->quantize->quantize_group(m.instance, &group, &k_parallel), TROUPE_OK) << m.message();
        std::vector<uint8_t> expected(row_bytes);
        for (int64_t r = 0; r < p.n_out; ++r) {
            troupe::ref::quantize_row(static_cast<troupe::ggml_type>(type), p.w.data() + r * p.n_in, expected.data(),
                                      p.n_in);
            EXPECT_EQ(std::memcmp(out.data() + r * row_bytes, expected.data(), row_bytes), 0) << type << " row " << r;
        }
        for (size_t i = row_bytes * static_cast<size_t>(p.n_out); i < out.size(); ++i)
            ASSERT_EQ(out[i], 0xAB) << "wrote past the last row, type " << type;
        for (float s : scales) ASSERT_EQ(s, 1.0f);
    }
}

TEST_F(quantize_methods, gptq_has_a_clearly_lower_output_error_than_rtn_in_the_same_format) {
    const problem p = make_problem(256, 45, 2048, 512, 9);
    for (const troupe_type type :
         {TROUPE_TYPE_Q4_0, TROUPE_TYPE_Q4_1, TROUPE_TYPE_W4_G128, TROUPE_TYPE_Q8_0, TROUPE_TYPE_Q4_K}) {
        method rtn(lib("rtn"), {});
        method gptq(lib("gptq"), {});
        const double e_rtn = output_error(p, quantize_with(rtn, p, type, false));
        const double e_gptq = output_error(p, quantize_with(gptq, p, type, false));
        std::printf("%-8s output error  rtn %.4g  gptq %.4g  (%.2fx)\n", troupe_type_layout_of(type).name, e_rtn,
                    e_gptq, e_rtn / e_gptq);
        EXPECT_LT(e_gptq, 0.7 * e_rtn) << troupe_type_layout_of(type).name;
    }
}

TEST_F(quantize_methods, gptq_with_act_order_or_clipping_is_not_worse_and_block_size_only_changes_rounding) {
    const problem p = make_problem(256, 45, 2048, 512, 10);
    for (const troupe_type type : {TROUPE_TYPE_Q4_0, TROUPE_TYPE_W4_G128}) {
        method plain(lib("gptq"), {{"act_order", "false"}, {"clip", "false"}});
        method ordered(lib("gptq"), {{"act_order", "true"}, {"clip", "false"}});
        method clipped(lib("gptq"), {{"act_order", "false"}, {"clip", "true"}});
        method small_blocks(lib("gptq"), {{"act_order", "false"}, {"clip", "false"}, {"block_size", "32"}});
        const double e_plain = output_error(p, quantize_with(plain, p, type, false));
        const double e_ordered = output_error(p, quantize_with(ordered, p, type, false));
        const double e_clipped = output_error(p, quantize_with(clipped, p, type, false));
        const double e_small = output_error(p, quantize_with(small_blocks, p, type, false));
        std::printf("%-8s gptq output error  plain %.4g  act_order %.4g  clip %.4g  block_size 32 %.4g\n",
                    troupe_type_layout_of(type).name, e_plain, e_ordered, e_clipped, e_small);
        EXPECT_LE(e_ordered, 1.05 * e_plain) << troupe_type_layout_of(type).name;
        EXPECT_LE(e_clipped, 1.05 * e_plain) << troupe_type_layout_of(type).name;
        EXPECT_NEAR(e_small, e_plain, 0.02 * e_plain) << "lazy batching must not change the algorithm";
    }
}

TEST_F(quantize_methods, awq_has_a_clearly_lower_output_error_than_rtn_with_its_input_scales_folded) {
    const problem p = make_problem(256, 45, 2048, 512, 9);
    for (const troupe_type type : {TROUPE_TYPE_Q4_0, TROUPE_TYPE_Q4_1, TROUPE_TYPE_W4_G128, TROUPE_TYPE_Q4_K}) {
        method rtn(lib("rtn"), {});
        method awq(lib("awq"), {});
        method clip_only(lib("awq"), {});
        method sampled(lib("awq"), {{"n_samples", "128"}});  // narrower than the input: sampled rows, no Gram
        const double e_rtn = output_error(p, quantize_with(rtn, p, type, false));
        const double e_awq = output_error(p, quantize_with(awq, p, type, true));
        const double e_clip = output_error(p, quantize_with(clip_only, p, type, false));
        const double e_sampled = output_error(p, quantize_with(sampled, p, type, true));
        std::printf(
            "%-8s output error  rtn %.4g  awq %.4g (%.2fx)  from 128 sampled rows %.4g  without input scales "
            "%.4g\n",
            troupe_type_layout_of(type).name, e_rtn, e_awq, e_rtn / e_awq, e_sampled, e_clip);
        EXPECT_LT(e_awq, 0.8 * e_rtn) << troupe_type_layout_of(type).name;
        EXPECT_LT(e_sampled, 0.8 * e_rtn) << troupe_type_layout_of(type).name;
        EXPECT_LE(e_clip, 1.02 * e_rtn) << troupe_type_layout_of(type).name;
    }
}

TEST_F(quantize_methods, awq_scales_up_the_channels_with_large_inputs) {
    const problem p = make_problem(128, 32, 1024, 0, 14);
    method awq(lib("awq"), {});
    for (size_t r0 = 0; r0 < p.calib.size(); r0 += 128 * 100) {
        const std::vector<float> step(
            p.calib.begin() + static_cast<std::ptrdiff_t>(r0),
            p.calib.begin() + static_cast<std::ptrdiff_t>(std::min(p.calib.size(), r0 + 128 * 100)));
        ASSERT_EQ(awq.observe(0, TROUPE_TAP_FFN_NORM, step, 128), TROUPE_OK);
    }
    std::vector<uint8_t> out(troupe_row_bytes(TROUPE_TYPE_Q4_0, 128) * 32);
    std::vector<float> scales(128, -1.0f);
    const troupe_quantize_weight weights[2] = {
        {sizeof(troupe_quantize_weight), TROUPE_QUANTIZE_WEIGHT_VERSION, "gate", p.w.data(), 16, TROUPE_TYPE_Q4_0,
         out.data()},
        {sizeof(troupe_quantize_weight), TROUPE_QUANTIZE_WEIGHT_VERSION, "up", p.w.data() + 16 * 128, 16,
         TROUPE_TYPE_Q4_0, out.data() + out.size() / 2}};
    const troupe_quantize_group group = {sizeof(troupe_quantize_group),
                                         TROUPE_QUANTIZE_GROUP_VERSION,
                                         0,
                                         TROUPE_TAP_FFN_NORM,
                                         128,
                                         2,
                                         weights,
                                         scales.data()};
    ASSERT_EQ(awq.d->quantize->quantize_group(awq.instance, &group, &k_parallel), TROUPE_OK) << awq.message();
    float outlier_min = 1e30f, rest_max = 0.0f;
    for (int64_t i = 0; i < 128; ++i) {
        ASSERT_TRUE(std::isfinite(scales[i]) && scales[i] > 0.0f) << i;
        const bool outlier = i == 5 || i == 42 || i == 79 || i == 116;  // make_problem's (i * 37 + 5) % n_in
        if (outlier)
            outlier_min = std::min(outlier_min, scales[i]);
        else
            rest_max = std::max(rest_max, scales[i]);
    }
    EXPECT_GT(outlier_min, rest_max);
}

TEST_F(quantize_methods, gptq_with_input_scales_is_not_worse_and_writes_positive_scales) {
    const problem p = make_problem(256, 45, 2048, 512, 9);
    for (const troupe_type type : {TROUPE_TYPE_Q4_0, TROUPE_TYPE_W4_G128}) {
        method unscaled(lib("gptq"), {{"scale_inputs", "false"}});
        method scaled(lib("gptq"), {});  // scale_inputs by default
        const double e_unscaled = output_error(p, quantize_with(unscaled, p, type, true));
        const double e_scaled = output_error(p, quantize_with(scaled, p, type, true));
        std::printf("%-8s gptq output error  %.4g  with input scales %.4g\n", troupe_type_layout_of(type).name,
                    e_unscaled, e_scaled);
        EXPECT_LE(e_scaled, 1.02 * e_unscaled) << troupe_type_layout_of(type).name;
    }
}

TEST_F(quantize_methods, gptq_zeroes_the_weights_of_dead_inputs_and_quantizes_the_rest) {
    problem p = make_problem(128, 16, 512, 128, 11);
    const int64_t dead[] = {3, 64, 127};
    for (std::vector<float>* x : {&p.calib, &p.test}) {
        for (size_t r = 0; r < x->size() / static_cast<size_t>(p.n_in); ++r)
            for (int64_t i : dead) (*x)[r * p.n_in + i] = 0.0f;
    }
    method gptq(lib("gptq"), {});
    const std::vector<float> q = quantize_with(gptq, p, TROUPE_TYPE_Q8_0, false);
    ASSERT_FALSE(q.empty());
    for (int64_t r = 0; r < p.n_out; ++r) {
        for (int64_t i : dead) EXPECT_EQ(q[r * p.n_in + i], 0.0f) << "row " << r << " column " << i;
    }
    method rtn(lib("rtn"), {});
    EXPECT_LT(output_error(p, q), output_error(p, quantize_with(rtn, p, TROUPE_TYPE_Q8_0, false)));
}

TEST_F(quantize_methods, gptq_refuses_groups_it_has_no_calibration_for) {
    method gptq(lib("gptq"), {});
    const problem p = make_problem(64, 4, 0, 0, 12);
    std::vector<uint8_t> out(troupe_row_bytes(TROUPE_TYPE_Q8_0, 64) * 4);
    const troupe_quantize_weight weight = {sizeof(troupe_quantize_weight),
                                           TROUPE_QUANTIZE_WEIGHT_VERSION,
                                           "blk.2.ffn_down.weight",
                                           p.w.data(),
                                           4,
                                           TROUPE_TYPE_Q8_0,
                                           out.data()};
    const troupe_quantize_group group = {sizeof(troupe_quantize_group),
                                         TROUPE_QUANTIZE_GROUP_VERSION,
                                         2,
                                         TROUPE_TAP_FFN_HIDDEN,
                                         64,
                                         1,
                                         &weight,
                                         nullptr};
    EXPECT_EQ(gptq.d->quantize->quantize_group(gptq.instance, &group, &k_parallel), TROUPE_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(gptq.message(),
              "quantize_group: no calibration rows were observed for layer 2 ffn_hidden (GPTQ needs "
              "the inputs of every linear it quantizes)");
}

TEST_F(quantize_methods, observe_refuses_device_rows_and_changed_widths_and_ignores_taps_it_does_not_use) {
    for (const char* name : {"gptq", "awq"}) {
        method m(lib(name), {});
        const std::vector<float> rows(4 * 64, 0.5f), wider(4 * 96, 0.5f);
        const std::vector<int64_t> seq(4, 0);
        const std::vector<int32_t> pos = {0, 1, 2, 3};
        troupe_tap_data cuda = {sizeof(troupe_tap_data),
                                TROUPE_TAP_DATA_VERSION,
                                TROUPE_TAP_ATTN_NORM,
                                0,
                                4,
                                64,
                                rows.data(),
                                seq.data(),
                                pos.data(),
                                TROUPE_BACKEND_CUDA,
                                nullptr,
                                nullptr};
        EXPECT_EQ(m.d->taps->observe(m.instance, &cuda), TROUPE_ERR_UNSUPPORTED) << name;
        EXPECT_EQ(m.message(), "observe: calibration runs on the CPU backend only") << name;
        EXPECT_EQ(m.observe(0, TROUPE_TAP_ATTN_NORM, rows, 64), TROUPE_OK) << name;
        EXPECT_EQ(m.observe(0, TROUPE_TAP_ATTN_NORM, wider, 96), TROUPE_ERR_INVALID_ARGUMENT) << name;
        EXPECT_EQ(m.message(), "observe: layer 0 tap attn_norm changed width from 64 to 96") << name;
        EXPECT_EQ(m.observe(0, TROUPE_TAP_Q, wider, 96), TROUPE_OK) << name << ": taps that are no linear's input";
        EXPECT_EQ(m.observe(-1, TROUPE_TAP_LOGITS, wider, 96), TROUPE_OK) << name;
    }
}

TEST_F(quantize_methods, quantize_group_refuses_types_and_shapes_it_cannot_write) {
    const problem p = make_problem(96, 4, 0, 0, 13);
    std::vector<uint8_t> out(4096);
    struct row {
        uint32_t type;
        std::string message;
    };
    const row table[] = {
        {TROUPE_TYPE_Q6_K, "w: cannot write Q6_K (writes Q8_0, Q4_0, Q4_1, W4_G64, W4_G128, Q4_K)"},
        {TROUPE_TYPE_W4_G64, "w: rows of 96 weights are not whole blocks of W4_G64 (64 weights)"},
    };
    for (const row& r : table) {
        method m(lib("rtn"), {});
        const troupe_quantize_weight weight = {
            sizeof(troupe_quantize_weight), TROUPE_QUANTIZE_WEIGHT_VERSION, "w", p.w.data(), 4, r.type, out.data()};
        const troupe_quantize_group group = {sizeof(troupe_quantize_group),
                                             TROUPE_QUANTIZE_GROUP_VERSION,
                                             0,
                                             TROUPE_TAP_ATTN_NORM,
                                             96,
                                             1,
                                             &weight,
                                             nullptr};
        EXPECT_EQ(m.d->quantize->quantize_group(m.instance, &group, &k_parallel), TROUPE_ERR_INVALID_ARGUMENT);
        EXPECT_EQ(m.message(), r.message);
    }
}

}  // namespace
