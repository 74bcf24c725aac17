// Plugins of both ABI versions through the host. Version-1 fixtures (built against the frozen ABI 1 header in
// fixtures/v1) keep loading and doing their work; ABI 2 op tables are checked field by field: a kv plugin needs
// layout and forward, a quant plugin a complete quant or quantize table, a taps table wanted and observe.
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "core/model/compute_context.h"
#include "core/plugin_host/parallel_bridge.h"
#include "kernels/ref/attention.h"
#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

// One step of attention for `positions` of `seq_of`, on pools of `n_blocks` blocks (NaN where never written).
struct attention_fixture {
    int32_t n_heads = 4, n_kv_heads = 2, head_dim = 8, block_size = 4;
    std::vector<std::vector<int32_t>> tables = {{3, 0, 5}, {1, 4}};  // shuffled blocks per sequence
    std::vector<const int32_t*> table_ptrs = {tables[0].data(), tables[1].data()};
    std::vector<float> k_pool, v_pool;  // [6 blocks, block_size, n_kv_heads, head_dim]

    attention_fixture() {
        const size_t n = size_t{6} * block_size * n_kv_heads * head_dim;
        k_pool.assign(n, std::nanf(""));
        v_pool.assign(n, std::nanf(""));
    }
};

// Runs two steps (a prefill of 5 and 3 tokens, then one token each) through `forward` and returns the outputs.
template <class forward_fn>
std::vector<float> run_two_steps(attention_fixture& f, forward_fn forward) {
    struct step {
        std::vector<int32_t> positions, seq_of;
    };
    const std::vector<step> steps = {{{0, 1, 2, 3, 4, 0, 1, 2}, {0, 0, 0, 0, 0, 1, 1, 1}}, {{5, 3}, {0, 1}}};
    std::vector<float> all_out;
    uint32_t seed = 11;
    for (const step& s : steps) {
        const int32_t n_tokens = static_cast<int32_t>(s.positions.size());
        const auto q = random_floats(size_t(n_tokens) * f.n_heads * f.head_dim, seed++);
        const auto k = random_floats(size_t(n_tokens) * f.n_kv_heads * f.head_dim, seed++);
        const auto v = random_floats(size_t(n_tokens) * f.n_kv_heads * f.head_dim, seed++);
        std::vector<float> out(q.size(), std::nanf(""));
        attention_call c;
        c.n_tokens = n_tokens;
        c.n_heads = f.n_heads;
        c.n_kv_heads = f.n_kv_heads;
        c.head_dim = f.head_dim;
        c.scale = 1.0f / std::sqrt(float(f.head_dim));
        c.q = q.data();
        c.k = k.data();
        c.v = v.data();
        c.out = out.data();
        c.positions = s.positions.data();
        c.seq_of = s.seq_of.data();
        c.n_seqs = 2;
        c.block_tables = f.table_ptrs.data();
        c.block_size = f.block_size;
        c.k_pool = f.k_pool.data();
        c.v_pool = f.v_pool.data();
        forward(c);
        all_out.insert(all_out.end(), out.begin(), out.end());
    }
    return all_out;
}

TEST(plugin_abi_1, an_attention_plugin_built_against_abi_1_matches_the_reference_attention) {
    plugin_host host = fixture_plugins();
    auto p = host.load(plugin_kind::attention, "v1ref");
    ASSERT_TRUE(p.ok()) << p.message();
    EXPECT_EQ(p->info.abi_version, 1u);
    ASSERT_NE(p->attention, nullptr);
    EXPECT_EQ(p->instance->kv_ops(), nullptr);
    EXPECT_EQ(p->instance->tap_ops(), nullptr);
    EXPECT_TRUE(p->attention->supports(kv_dtype::f32));
    EXPECT_FALSE(p->attention->supports(kv_dtype::f16));

    attention_fixture by_plugin, by_reference;
    const parallel_for_fn threads = threaded_parallel_for(3);
    const auto got = run_two_steps(by_plugin, [&](const attention_call& c) {
        const status s = p->attention->forward(c, threads);
        ASSERT_TRUE(s.ok()) << s.message();
    });
    const auto want = run_two_steps(by_reference, [](const attention_call& c) { ref::attention(c); });
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f) << "output " << i;
}

TEST(plugin_abi_1, a_quant_plugin_built_against_abi_1_multiplies_its_f32_weights) {
    plugin_host host = fixture_plugins();
    auto p = host.load(plugin_kind::quant, "v1f32");
    ASSERT_TRUE(p.ok()) << p.message();
    EXPECT_EQ(p->info.abi_version, 1u);
    ASSERT_NE(p->quant, nullptr);
    EXPECT_EQ(p->instance->quantize_ops(), nullptr);
    EXPECT_TRUE(p->quant->claims(ggml_type::f32));
    EXPECT_FALSE(p->quant->claims(ggml_type::q8_0));

    const int64_t n_in = 13, n_out = 7, n_tokens = 3, stride_floats = 16;  // rows padded to 16 floats
    const auto w = random_floats(size_t(n_out * stride_floats), 5);
    const auto x = random_floats(size_t(n_tokens * n_in), 6);
    auto prepared = p->quant->prepare(weight_view{ggml_type::f32, w.data(), n_in, n_out, stride_floats * 4});
    ASSERT_TRUE(prepared.ok()) << prepared.message();
    EXPECT_EQ((*prepared)->n_bytes(), size_t(n_in * n_out * 4));
    std::vector<float> y(size_t(n_tokens * n_out), std::nanf(""));
    const status s = p->quant->matmul(**prepared, x.data(), y.data(), n_tokens, threaded_parallel_for(2));
    ASSERT_TRUE(s.ok()) << s.message();
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t o = 0; o < n_out; ++o) {
            double want = 0.0;
            for (int64_t i = 0; i < n_in; ++i) want += double{w[o * stride_floats + i]} * x[t * n_in + i];
            EXPECT_NEAR(y[t * n_out + o], want, 1e-5) << "token " << t << " row " << o;
        }
    }
    auto refused = p->quant->prepare(weight_view{ggml_type::q8_0, w.data(), 32, 1, 34});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.message(), "plugin quant/v1f32: prepare failed: only F32 weights (type 0)");
}

struct propose_case {
    std::vector<int32_t> context;
    int32_t max_draft;
    std::vector<int32_t> expected;
};

TEST(plugin_abi_1, a_spec_plugin_built_against_abi_1_proposes_what_followed_the_last_token) {
    plugin_host host = fixture_plugins();
    auto p = host.load(plugin_kind::spec, "v1bigram");
    ASSERT_TRUE(p.ok()) << p.message();
    EXPECT_EQ(p->info.abi_version, 1u);
    const std::vector<propose_case> cases = {
        {{1, 2, 3, 4, 1, 2}, 3, {3, 4, 1}},  // latest earlier 2 at index 1
        {{1, 2, 3, 4, 1, 2}, 8, {3, 4, 1, 2}},
        {{5, 9, 5, 7, 5}, 4, {7, 5}},  // the latest earlier occurrence wins
        {{1, 2, 3}, 4, {}},            // no earlier occurrence
        {{7}, 4, {}},
    };
    for (const propose_case& c : cases) {
        auto r = propose_chain(*p->spec, c.context, c.max_draft);
        ASSERT_TRUE(r.ok()) << r.message();
        EXPECT_EQ(*r, c.expected) << "context of " << c.context.size() << ", max_draft " << c.max_draft;
    }
}

TEST(plugin_abi_1, a_version_1_plugin_validates_its_params_through_the_host) {
    plugin_host host = fixture_plugins();
    auto p = host.load(plugin_kind::spec, "v1bigram", yaml("{n: 3}"));
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.message(), "plugin spec/v1bigram: params: this plugin takes no parameters");
}

struct table_case {
    plugin_kind kind;
    const char* name;
    const char* expected;  // the refusal
};

TEST(plugin_abi_2, incomplete_op_tables_are_refused_naming_what_is_missing) {
    const std::vector<table_case> cases = {
        {plugin_kind::kv, "noforward", "plugin kv/noforward: kv op table lacks forward"},
        {plugin_kind::quant, "halfquantize", "plugin quant/halfquantize: quantize op table lacks quantize_group"},
        {plugin_kind::spec, "halftaps", "plugin spec/halftaps: taps op table lacks observe"},
        {plugin_kind::quant, "notables",
         "plugin quant/notables: descriptor has neither a quant op table (runtime matmul) nor a quantize op table "
         "(offline quantization); a quant plugin needs one or both"},
        {plugin_kind::kv, "v1ref", "is an attention plugin, expected kv"},
    };
    plugin_host host = fixture_plugins();
    for (const table_case& c : cases) {
        plugin_spec spec{c.kind, c.name, "", YAML::Node()};
        if (std::string(c.name) == "v1ref") spec.path = host.library_path(plugin_kind::attention, "v1ref");
        auto p = host.load(spec);
        ASSERT_FALSE(p.ok()) << c.name;
        EXPECT_NE(p.message().find(c.expected), std::string::npos) << p.message();
    }
}

TEST(plugin_abi_2, a_quant_plugin_with_only_a_quantize_table_loads_but_offers_no_runtime_matmul) {
    plugin_host host = fixture_plugins();
    auto p = host.load(plugin_kind::quant, "quantizeonly");
    ASSERT_TRUE(p.ok()) << p.message();
    EXPECT_EQ(p->quant, nullptr);
    ASSERT_NE(p->instance->quantize_ops(), nullptr);
    EXPECT_EQ(p->instance->quantize_ops()->can_write(p->instance->handle(), TROUPE_TYPE_Q8_0, 64), 1);
    EXPECT_EQ(p->instance->quantize_ops()->can_write(p->instance->handle(), TROUPE_TYPE_Q8_0, 48), 0);
    auto runtime = host.load_quant("quantizeonly");
    ASSERT_FALSE(runtime.ok());
    EXPECT_EQ(runtime.message(),
              "plugin quant/quantizeonly: has no runtime matmul (no quant op table); it only quantizes offline "
              "(troupe quantize --method quantizeonly)");
}

TEST(plugin_abi_2, a_kv_plugin_is_found_under_kv_and_declares_its_layout) {
    plugin_host host = fixture_plugins();
    EXPECT_EQ(host.library_path(plugin_kind::kv, "int8"),
              std::string(TROUPE_TEST_FIXTURE_DIR) + "/kv/libtroupe_kv_int8.so");
    auto instance = host.load_kv("complete");
    ASSERT_TRUE(instance.ok()) << instance.message();
    const troupe_kv_ops* ops = (*instance)->kv_ops();
    ASSERT_NE(ops, nullptr);
    troupe_kv_shape shape{sizeof(troupe_kv_shape), TROUPE_KV_SHAPE_VERSION, 5, 4, 64, 16, 8, TROUPE_BACKEND_CPU};
    troupe_kv_layout layout{};
    ASSERT_EQ(ops->layout((*instance)->handle(), &shape, &layout), TROUPE_OK);
    EXPECT_EQ(layout.bytes_per_token, size_t{2 * 2 * 4 * 64});
    EXPECT_EQ(layout.bytes_per_block, size_t{8});
}

TEST(plugin_kinds, kv_is_a_kind_with_its_yaml_name_and_c_value) {
    auto k = parse_plugin_kind("kv");
    ASSERT_TRUE(k.ok()) << k.message();
    EXPECT_EQ(*k, plugin_kind::kv);
    EXPECT_EQ(plugin_kind_name(plugin_kind::kv), "kv");
    EXPECT_EQ(to_c_kind(plugin_kind::kv), TROUPE_PLUGIN_KIND_KV);
    EXPECT_EQ(parse_plugin_kind("kvcache").message(),
              "unknown plugin kind 'kvcache' (valid kinds: attention, quant, spec, kv)");
}

TEST(parallel_bridge, ops_get_the_backend_and_the_lanes_stream) {
    const parallel_for_fn pool = threaded_parallel_for(2);
    const parallel_bridge cpu(pool);
    EXPECT_EQ(cpu.c()->version, TROUPE_PARALLEL_VERSION);
    EXPECT_EQ(cpu.c()->struct_size, sizeof(troupe_parallel));
    EXPECT_EQ(cpu.c()->backend, TROUPE_BACKEND_CPU);
    EXPECT_EQ(cpu.c()->stream, nullptr);
    EXPECT_NE(cpu.c()->parallel_for, nullptr);

    EXPECT_EQ(cpu.c()->parallel_ranges, nullptr);  // no pool named: plugins fall back to parallel_for

    int fake_stream = 0;
    const parallel_bridge cuda(plugin_backend::cuda, &fake_stream);
    EXPECT_EQ(cuda.c()->backend, TROUPE_BACKEND_CUDA);
    EXPECT_EQ(cuda.c()->stream, &fake_stream);
    EXPECT_EQ(cuda.c()->parallel_for, nullptr);
    EXPECT_EQ(cuda.c()->parallel_ranges, nullptr);
}

// A plugin's parallel_ranges (version 3) is the pool's: every item of [0, n) once, in pieces of at most `grain`;
// a bad grain is refused.
TEST(parallel_bridge, parallel_ranges_covers_every_item_once_in_grains_on_the_pools_threads) {
    cpu::thread_pool pool(2);
    const compute_context ctx = compute_context::over(pool);
    const parallel_bridge bridge(ctx.parallel_for, ctx.pool);
    ASSERT_NE(bridge.c()->parallel_ranges, nullptr);
    for (const auto& [n, grain] : {std::pair<int64_t, int64_t>{1, 1}, {1000, 7}, {4096, 64}, {33, 100}}) {
        struct seen {
            std::vector<std::atomic<int>> hits;
            std::atomic<int64_t> bad_pieces{0};
            int64_t grain;
        } s{std::vector<std::atomic<int>>(static_cast<size_t>(n)), {}, grain};
        auto fn = [](void* ctx, int64_t begin, int64_t end) {
            auto* t = static_cast<seen*>(ctx);
            if (end - begin > t->grain || end <= begin) t->bad_pieces.fetch_add(1);
            for (int64_t i = begin; i < end; ++i) t->hits[static_cast<size_t>(i)].fetch_add(1);
        };
        ASSERT_EQ(bridge.c()->parallel_ranges(bridge.c()->host_ctx, n, grain, fn, &s), TROUPE_OK);
        EXPECT_EQ(s.bad_pieces.load(), 0) << "n " << n << " grain " << grain;
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(s.hits[static_cast<size_t>(i)].load(), 1) << "item " << i;
    }
    EXPECT_EQ(bridge.c()->parallel_ranges(
                  bridge.c()->host_ctx, 10, 0, [](void*, int64_t, int64_t) {}, nullptr),
              TROUPE_ERR_INVALID_ARGUMENT);
}

// parallel_shares (version 4) takes the caller's shares: every item once, no piece crossing a share's bound (a placed
// weight's shard lives in its own region), and says how many threads run them; bounds it cannot take are refused.
TEST(parallel_bridge, parallel_shares_keeps_every_piece_inside_the_callers_shares) {
    cpu::thread_pool pool(2);
    const compute_context ctx = compute_context::over(pool);
    const parallel_bridge bridge(ctx.parallel_for, ctx.pool);
    ASSERT_NE(bridge.c()->parallel_shares, nullptr);
    EXPECT_EQ(bridge.c()->n_threads, 2);
    const int64_t bounds[] = {0, 37, 1000};
    struct seen {
        std::vector<std::atomic<int>> hits;
        std::atomic<int64_t> bad_pieces{0};
    } s{std::vector<std::atomic<int>>(1000), {}};
    auto fn = [](void* ctx, int64_t begin, int64_t end) {
        auto* t = static_cast<seen*>(ctx);
        if (end <= begin || end - begin > 8 || (begin < 37 && end > 37)) t->bad_pieces.fetch_add(1);
        for (int64_t i = begin; i < end; ++i) t->hits[static_cast<size_t>(i)].fetch_add(1);
    };
    ASSERT_EQ(bridge.c()->parallel_shares(bridge.c()->host_ctx, bounds, 2, 8, fn, &s), TROUPE_OK);
    EXPECT_EQ(s.bad_pieces.load(), 0);
    for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(s.hits[static_cast<size_t>(i)].load(), 1) << "item " << i;
    const int64_t three[] = {0, 1, 2, 3};
    const int64_t descending[] = {0, 5, 3};
    const auto nothing = [](void*, int64_t, int64_t) {};
    EXPECT_EQ(bridge.c()->parallel_shares(bridge.c()->host_ctx, three, 3, 1, nothing, nullptr),
              TROUPE_ERR_INVALID_ARGUMENT);  // more shares than threads
    EXPECT_EQ(bridge.c()->parallel_shares(bridge.c()->host_ctx, descending, 2, 1, nothing, nullptr),
              TROUPE_ERR_INVALID_ARGUMENT);

    const parallel_bridge without_pool(ctx.parallel_for);
    EXPECT_EQ(without_pool.c()->parallel_shares, nullptr);
    EXPECT_EQ(without_pool.c()->n_threads, 0);
}

}  // namespace
}  // namespace troupe::testing
