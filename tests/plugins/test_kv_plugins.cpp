// The quantized KV-cache plugins (kv/int8, kv/kivi, kv/fp8) through the ABI: layout, then forward over a paged
// cache in shuffled blocks, several sequences in one call with their own window slots, prefill chunks then decodes
// (and a rollback that rewrites positions inside a full block), against a float attention over the sequences' K/V
// histories (double accumulation) with each format's error bound, and the AVX-512 kernels against their scalar twin.
// The pools start as NaN, so a kernel that reads a row or scale it should not poisons its output.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/plugin_host/parallel_bridge.h"
#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

struct kv_case {
    const char* name;  // test name part
    const char* plugin;
    const char* params;  // YAML, without `kernel`
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t block_size;
    float max_error;   // bound on max |out - float reference| (K, V in [-1, 1]): about a value's worst rounding
    float mean_error;  // bound on mean |out - float reference|: about twice the measured
};

void PrintTo(const kv_case& c, std::ostream* os) {
    *os << c.name;
}

// One call: each sequence writes positions [begin, begin + n) (n 0: not in the call).
struct step {
    std::vector<std::pair<int32_t, int32_t>> seqs;  // per sequence: (begin, n)
};

// Prefill chunks of odd sizes (partial blocks), decodes across block ends, and sequence 1 rolling back to
// position 20 (inside its second block, full by then) as a rejected draft would.
const std::vector<step> schedule = {
    {{{0, 7}, {0, 20}, {0, 1}}},   {{{7, 13}, {20, 1}, {1, 16}}},  {{{20, 1}, {21, 12}, {17, 1}}},
    {{{21, 1}, {33, 1}, {18, 1}}}, {{{22, 11}, {20, 3}, {19, 1}}}, {{{33, 1}, {23, 1}, {20, 13}}},
    {{{34, 1}, {24, 1}, {33, 1}}},
};
constexpr int32_t n_seqs = 3;
constexpr int32_t max_positions = 48;

struct kv_run {
    std::vector<float> out;  // every call's outputs, concatenated
    std::vector<float> reference;
};

// out = softmax(scale * q . k[0..pos]) . v[0..pos] for one query head.
void reference_head(const float* q, const std::vector<float>& k_hist, const std::vector<float>& v_hist, int32_t pos,
                    int32_t n_kv_heads, int32_t kv_head, int32_t hd, float scale, float* out) {
    std::vector<double> s(pos + 1);
    for (int32_t j = 0; j <= pos; ++j) {
        const float* k = k_hist.data() + (static_cast<size_t>(j) * n_kv_heads + kv_head) * hd;
        double dot = 0.0;
        for (int32_t d = 0; d < hd; ++d) dot += double{q[d]} * k[d];
        s[j] = dot * scale;
    }
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0.0;
    for (double& x : s) sum += (x = std::exp(x - mx));
    for (int32_t d = 0; d < hd; ++d) {
        double acc = 0.0;
        for (int32_t j = 0; j <= pos; ++j)
            acc += s[j] / sum * v_hist[(static_cast<size_t>(j) * n_kv_heads + kv_head) * hd + d];
        out[d] = static_cast<float>(acc);
    }
}

std::shared_ptr<plugin_instance> load(const kv_case& c, const std::string& kernel) {
    plugin_host host = real_plugins();
    YAML::Node params = yaml(c.params);
    params["kernel"] = kernel;
    auto inst = host.load_kv(c.plugin, params);
    EXPECT_TRUE(inst.ok()) << inst.err().message;
    return inst.ok() ? *inst : nullptr;
}

troupe_kv_layout layout_of(plugin_instance& inst, const kv_case& c) {
    troupe_kv_shape shape{
        sizeof(troupe_kv_shape), TROUPE_KV_SHAPE_VERSION, 2, c.n_kv_heads, c.head_dim, c.block_size, n_seqs,
        TROUPE_BACKEND_CPU};
    troupe_kv_layout layout{};
    layout.struct_size = sizeof layout;
    const int32_t rc = inst.kv_ops()->layout(inst.handle(), &shape, &layout);
    EXPECT_EQ(rc, TROUPE_OK) << inst.descriptor().error_message(inst.handle());
    return layout;
}

kv_run run(const kv_case& c, const std::string& kernel) {
    kv_run result;
    auto inst = load(c, kernel);
    if (!inst) return result;
    const troupe_kv_layout layout = layout_of(*inst, c);
    const size_t block_bytes = (c.block_size * layout.bytes_per_token + layout.bytes_per_block + 63) / 64 * 64;
    const int32_t blocks_per_seq = (max_positions + c.block_size - 1) / c.block_size;
    const int32_t n_blocks = blocks_per_seq * n_seqs + 3;
    // Every byte NaN-patterned (0xff is a NaN in float, a -1 in int8; kivi's halves too).
    std::vector<uint8_t> pool(block_bytes * n_blocks, 0xff);
    const size_t slot_bytes = static_cast<size_t>(layout.window_tokens) * layout.window_bytes_per_token;
    std::vector<uint8_t> window(slot_bytes * (n_seqs + 1), 0);
    const std::vector<int32_t> window_slot = {2, 0, 3};  // slot 1 unused
    std::vector<int32_t> ids(n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::mt19937 rng(7);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<std::vector<int32_t>> tables(n_seqs);
    for (int32_t s = 0; s < n_seqs; ++s) {
        tables[s].assign(ids.begin() + s * blocks_per_seq, ids.begin() + (s + 1) * blocks_per_seq);
    }
    const int32_t kvw = c.n_kv_heads * c.head_dim;
    const int32_t qw = c.n_heads * c.head_dim;
    std::vector<std::vector<float>> k_hist(n_seqs, std::vector<float>(max_positions * kvw));
    std::vector<std::vector<float>> v_hist = k_hist;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    uint32_t seed = 100;
    for (const step& st : schedule) {
        std::vector<int32_t> positions, seq_of;
        for (int32_t s = 0; s < n_seqs; ++s) {
            for (int32_t i = 0; i < st.seqs[s].second; ++i) {
                positions.push_back(st.seqs[s].first + i);
                seq_of.push_back(s);
            }
        }
        const int32_t n = static_cast<int32_t>(positions.size());
        const std::vector<float> q = random_floats(static_cast<size_t>(n) * qw, seed++);
        const std::vector<float> k = random_floats(static_cast<size_t>(n) * kvw, seed++);
        const std::vector<float> v = random_floats(static_cast<size_t>(n) * kvw, seed++);
        for (int32_t t = 0; t < n; ++t) {
            std::memcpy(&k_hist[seq_of[t]][positions[t] * kvw], &k[t * kvw], kvw * sizeof(float));
            std::memcpy(&v_hist[seq_of[t]][positions[t] * kvw], &v[t * kvw], kvw * sizeof(float));
        }
        std::vector<float> out(static_cast<size_t>(n) * qw, NAN);
        std::vector<const int32_t*> table_ptrs;
        for (const auto& t : tables) table_ptrs.push_back(t.data());
        troupe_kv_call call{};
        call.struct_size = sizeof call;
        call.version = TROUPE_KV_CALL_VERSION;
        call.layer = 1;
        call.n_tokens = n;
        call.n_heads = c.n_heads;
        call.n_kv_heads = c.n_kv_heads;
        call.head_dim = c.head_dim;
        call.scale = scale;
        call.q = q.data();
        call.k = k.data();
        call.v = v.data();
        call.out = out.data();
        call.positions = positions.data();
        call.seq_of = seq_of.data();
        call.n_seqs = n_seqs;
        call.block_tables = table_ptrs.data();
        call.block_size = c.block_size;
        call.pool = pool.data();
        call.block_bytes = block_bytes;
        call.window = layout.window_tokens > 0 ? window.data() : nullptr;
        call.window_slot = layout.window_tokens > 0 ? window_slot.data() : nullptr;
        const parallel_bridge bridge(threaded_parallel_for(3));
        const int32_t rc = inst->kv_ops()->forward(inst->handle(), &call, bridge.c());
        EXPECT_EQ(rc, TROUPE_OK) << inst->descriptor().error_message(inst->handle());
        std::vector<float> ref(out.size());
        const int32_t group = c.n_heads / c.n_kv_heads;
        for (int32_t t = 0; t < n; ++t) {
            for (int32_t h = 0; h < c.n_heads; ++h) {
                reference_head(&q[(t * c.n_heads + h) * c.head_dim], k_hist[seq_of[t]], v_hist[seq_of[t]], positions[t],
                               c.n_kv_heads, h / group, c.head_dim, scale, &ref[(t * c.n_heads + h) * c.head_dim]);
            }
        }
        result.out.insert(result.out.end(), out.begin(), out.end());
        result.reference.insert(result.reference.end(), ref.begin(), ref.end());
    }
    return result;
}

float mean_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double sum = 0.0;
    for (size_t i = 0; i < a.size(); ++i) sum += std::fabs(a[i] - b[i]);
    return static_cast<float>(sum / static_cast<double>(a.size()));
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    float m = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) {
        const float d = std::fabs(a[i] - b[i]);
        if (!(d <= m)) m = std::isnan(d) ? INFINITY : d;
    }
    return m;
}

class kv_plugin : public ::testing::TestWithParam<kv_case> {};

TEST_P(kv_plugin, scalar_kernels_stay_within_the_formats_error_bound_of_float_attention) {
    const kv_run r = run(GetParam(), "scalar");
    ASSERT_FALSE(r.out.empty());
    const float err = max_abs_diff(r.out, r.reference);
    EXPECT_LE(err, GetParam().max_error) << "max |out - float reference|";
    EXPECT_GT(err, 0.0f) << "a quantized cache that is exact cannot be quantizing";
    const float mean = mean_abs_diff(r.out, r.reference);
    EXPECT_LE(mean, GetParam().mean_error) << "mean |out - float reference|";
    std::printf("%s: max |error| %.5f, mean %.6f\n", GetParam().name, err, mean);
}

TEST_P(kv_plugin, avx512_kernels_equal_their_scalar_twin_up_to_summation_order) {
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl")) {
        GTEST_SKIP() << "this CPU has no AVX-512F/BW/VL";
    }
    const kv_run scalar = run(GetParam(), "scalar");
    const kv_run simd = run(GetParam(), "avx512");
    ASSERT_EQ(scalar.out.size(), simd.out.size());
    EXPECT_LE(max_abs_diff(scalar.out, simd.out), 2e-5f);
}

TEST_P(kv_plugin, avx2_kernels_equal_their_scalar_twin_up_to_summation_order) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c")) {
        GTEST_SKIP() << "this CPU has no AVX2/FMA/F16C";
    }
    const kv_run scalar = run(GetParam(), "scalar");
    const kv_run simd = run(GetParam(), "avx2");
    ASSERT_EQ(scalar.out.size(), simd.out.size());
    EXPECT_LE(max_abs_diff(scalar.out, simd.out), 2e-5f);
}

// Max bounds: about the worst rounding of one value (int8: amax / 254, doubled for the keys' effect; fp8: half an ulp
// at 1, 2^-4 for e4m3 and 2^-3 for e5m2; kivi: a third of the range), as a token early in a full block averages few
// values. Mean bounds: about twice the mean measured on this schedule.
INSTANTIATE_TEST_SUITE_P(
    kv_plugins, kv_plugin,
    ::testing::Values(
        kv_case{"int8_hd64_gqa2_bs16", "int8", "{}", 8, 4, 64, 16, 0.01f, 0.0012f},
        kv_case{"int8_hd128_mha_bs8", "int8", "{}", 2, 2, 128, 8, 0.01f, 0.0012f},
        kv_case{"int8_hd8_gqa4_bs5", "int8", "{}", 8, 2, 8, 5, 0.01f, 0.0012f},
        kv_case{"kivi_hd64_gqa2_bs16", "kivi", "{residual_blocks: 1}", 8, 4, 64, 16, 0.6f, 0.08f},
        kv_case{"kivi_hd128_gqa3_bs8", "kivi", "{value_group: 64, residual_blocks: 1}", 6, 2, 128, 8, 0.6f, 0.08f},
        kv_case{"kivi_hd24_mqa_bs6", "kivi", "{value_group: 8, residual_blocks: 1}", 4, 1, 24, 6, 0.6f, 0.08f},
        kv_case{"kivi_residual3_hd64_gqa2_bs8", "kivi", "{residual_blocks: 3}", 8, 4, 64, 8, 0.6f, 0.06f},
        kv_case{"kivi_residual2_hd24_mqa_bs6", "kivi", "{residual_blocks: 2, value_group: 8}", 4, 1, 24, 6, 0.6f,
                0.06f},
        kv_case{"fp8_e4m3_hd64_gqa2_bs16", "fp8", "{}", 8, 4, 64, 16, 0.0625f, 0.008f},
        kv_case{"fp8_e5m2_hd128_gqa4_bs8", "fp8", "{format: e5m2}", 8, 2, 128, 8, 0.125f, 0.015f},
        kv_case{"fp8_residual2_hd64_gqa2_bs8", "fp8", "{residual_blocks: 2}", 8, 4, 64, 8, 0.0625f, 0.006f},
        kv_case{"fp8_e4m3_unscaled_hd40_mha_bs7", "fp8", "{scale: none}", 3, 3, 40, 7, 0.0625f, 0.007f}),
    [](const ::testing::TestParamInfo<kv_case>& info) { return std::string(info.param.name); });

struct layout_case {
    const char* plugin;
    int32_t head_dim;
    double max_fraction_of_f16;  // bytes per token per layer (blocks' metadata spread over their tokens)
};

TEST(kv_plugin_layout, bytes_per_token_including_scales_are_the_formats_fraction_of_f16) {
    for (const layout_case& c :
         {layout_case{"int8", 64, 0.6}, layout_case{"int8", 128, 0.6}, layout_case{"kivi", 64, 0.25},
          layout_case{"kivi", 128, 0.25}, layout_case{"fp8", 128, 0.55}}) {
        SCOPED_TRACE(std::string(c.plugin) + " head_dim " + std::to_string(c.head_dim));
        const kv_case kc{"", c.plugin, "{}", 8, 8, c.head_dim, 16, 0, 0};
        auto inst = load(kc, "auto");
        ASSERT_NE(inst, nullptr);
        const troupe_kv_layout l = layout_of(*inst, kc);
        const double per_token = l.bytes_per_token + static_cast<double>(l.bytes_per_block) / 16;
        const double f16 = 2.0 * 8 * c.head_dim * 2;
        EXPECT_LE(per_token, c.max_fraction_of_f16 * f16);
        EXPECT_GT(per_token, 0.1 * f16);
    }
}

TEST(kv_plugin_refusals, bad_params_and_shapes_fail_with_the_key_or_the_shape_named) {
    plugin_host host = real_plugins();
    struct bad_params {
        const char* plugin;
        const char* params;
        const char* expected;
    };
    for (const bad_params& b : {bad_params{"kivi", "{value_group: 0}", "params.value_group: must be between 1 and 256"},
                                bad_params{"fp8", "{format: e3m4}", "params.format: must be one of e4m3, e5m2"},
                                bad_params{"int8", "{group: 3}", "params.group: unknown key (valid keys: kernel)"},
                                bad_params{"fp8", "{scale: block}", "params.scale: must be one of token, none"}}) {
        auto inst = host.load_kv(b.plugin, yaml(b.params));
        ASSERT_FALSE(inst.ok()) << b.plugin << " " << b.params;
        EXPECT_NE(inst.err().message.find(b.expected), std::string::npos) << inst.err().message;
    }
    struct bad_shape {
        const char* plugin;
        int32_t head_dim;
        const char* expected;
    };
    for (const bad_shape& b :
         {bad_shape{"int8", 6, "head_dim 6 is not a multiple of 4"}, bad_shape{"kivi", 6, "head_dim 6 must be a multiple of 4"},
          bad_shape{"fp8", 512, "head_dim in 1..256"}}) {
        auto inst = host.load_kv(b.plugin);
        ASSERT_TRUE(inst.ok()) << inst.err().message;
        troupe_kv_shape shape{sizeof(troupe_kv_shape), TROUPE_KV_SHAPE_VERSION, 2, 2, b.head_dim, 16, 4,
                              TROUPE_BACKEND_CPU};
        troupe_kv_layout layout{};
        layout.struct_size = sizeof layout;
        EXPECT_EQ((*inst)->kv_ops()->layout((*inst)->handle(), &shape, &layout), TROUPE_ERR_UNSUPPORTED);
        EXPECT_NE(std::string((*inst)->descriptor().error_message((*inst)->handle())).find(b.expected),
                  std::string::npos)
            << (*inst)->descriptor().error_message((*inst)->handle());
    }
}

}  // namespace
}  // namespace troupe::testing
