// attention/gqa through the ABI against a plain causal attention over contiguous per-sequence K/V
// histories (double accumulation). Several sequences at different positions share each call; the
// pools start as NaN, so a kernel that reads a row it should not poisons its output.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ref/attention.h"
#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

struct attention_case {
    const char* shape;  // test name part
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
    bool paged;  // many blocks of 4 in shuffled order, else one contiguous block per sequence
    const char* kernel;
    bool threaded;
};

void PrintTo(const attention_case& c, std::ostream* os) {
    *os << c.shape << (c.paged ? " paged " : " contiguous ") << c.kernel << (c.threaded ? " threaded" : " inline");
}

struct sequence_plan {
    int32_t n_prefill;  // positions written by the first call
    int32_t n_total;    // positions after the second call
};

const std::vector<sequence_plan> plans = {{5, 9}, {1, 2}, {12, 13}, {0, 3}};

bool cpu_supports(const std::string& kernel) {
    if (kernel == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (kernel == "avx512") return __builtin_cpu_supports("avx512f");
    return true;
}

// out = softmax(scale * q . k[0..pos]) . v[0..pos] for one query head, from contiguous histories.
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

class attention_plugin : public ::testing::TestWithParam<attention_case> {};

TEST_P(attention_plugin, matches_plain_causal_attention_over_two_steps_of_several_sequences) {
    const attention_case& c = GetParam();
    if (!cpu_supports(c.kernel)) GTEST_SKIP() << "this CPU lacks " << c.kernel;
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa", yaml(std::string("{kernel: ") + c.kernel + "}"));
    ASSERT_TRUE(op.ok()) << op.message();
    EXPECT_EQ((*op)->name(), "attention/gqa");

    const int32_t n_seqs = static_cast<int32_t>(plans.size());
    const int32_t hd = c.head_dim;
    const int32_t block_size = c.paged ? 4 : 16;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

    // Block tables: contiguous = block s for sequence s; paged = distinct blocks in shuffled order.
    std::vector<std::vector<int32_t>> tables(n_seqs);
    int32_t n_blocks = 0;
    for (int32_t s = 0; s < n_seqs; ++s) n_blocks += c.paged ? (plans[s].n_total + block_size - 1) / block_size : 1;
    std::vector<int32_t> ids(n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    if (c.paged) std::shuffle(ids.begin(), ids.end(), std::mt19937(11));
    for (int32_t s = 0, next = 0; s < n_seqs; ++s) {
        const int32_t need = c.paged ? (plans[s].n_total + block_size - 1) / block_size : 1;
        for (int32_t b = 0; b < need; ++b) tables[s].push_back(ids[next++]);
    }
    std::vector<const int32_t*> table_ptrs;
    for (auto& t : tables) table_ptrs.push_back(t.data());

    const size_t pool_floats = static_cast<size_t>(n_blocks) * block_size * c.n_kv_heads * hd;
    std::vector<float> k_pool(pool_floats, NAN), v_pool(pool_floats, NAN);

    // Full histories per sequence: [n_total, n_kv_heads, head_dim], and queries [n_total, n_heads, head_dim].
    std::vector<std::vector<float>> k_hist, v_hist, q_hist;
    for (int32_t s = 0; s < n_seqs; ++s) {
        const size_t n = plans[s].n_total;
        k_hist.push_back(random_floats(n * c.n_kv_heads * hd, 100 + s, -2.0f, 2.0f));
        v_hist.push_back(random_floats(n * c.n_kv_heads * hd, 200 + s));
        q_hist.push_back(random_floats(n * c.n_heads * hd, 300 + s, -2.0f, 2.0f));
    }

    for (int step = 0; step < 2; ++step) {
        // Tokens of this step, sequences interleaved: (sequence, position).
        std::vector<std::pair<int32_t, int32_t>> tokens;
        for (int32_t round = 0; round < 16; ++round) {
            for (int32_t s = n_seqs - 1; s >= 0; --s) {
                const int32_t p = (step == 0 ? 0 : plans[s].n_prefill) + round;
                if (p < (step == 0 ? plans[s].n_prefill : plans[s].n_total)) tokens.emplace_back(s, p);
            }
        }
        const int32_t n_tokens = static_cast<int32_t>(tokens.size());
        std::vector<float> q, k, v;
        std::vector<int32_t> positions, seq_of;
        for (auto [s, p] : tokens) {
            const size_t kv_row = static_cast<size_t>(p) * c.n_kv_heads * hd,
                         q_row = static_cast<size_t>(p) * c.n_heads * hd;
            k.insert(k.end(), k_hist[s].begin() + kv_row, k_hist[s].begin() + kv_row + c.n_kv_heads * hd);
            v.insert(v.end(), v_hist[s].begin() + kv_row, v_hist[s].begin() + kv_row + c.n_kv_heads * hd);
            q.insert(q.end(), q_hist[s].begin() + q_row, q_hist[s].begin() + q_row + c.n_heads * hd);
            positions.push_back(p);
            seq_of.push_back(s);
        }
        std::vector<float> out(static_cast<size_t>(n_tokens) * c.n_heads * hd, NAN);
        attention_call call{n_tokens,      c.n_heads, c.n_kv_heads,      hd,         scale,
                            q.data(),      k.data(),  v.data(),          out.data(), positions.data(),
                            seq_of.data(), n_seqs,    table_ptrs.data(), block_size, k_pool.data(),
                            v_pool.data()};
        const status st = (*op)->forward(call, c.threaded ? threaded_parallel_for() : no_parallel_for());
        ASSERT_TRUE(st.ok()) << st.message();

        for (int32_t t = 0; t < n_tokens; ++t) {
            const auto [s, p] = tokens[t];
            for (int32_t kvh = 0; kvh < c.n_kv_heads; ++kvh) {
                const int32_t block = tables[s][p / block_size];
                const size_t at =
                    ((static_cast<size_t>(block) * block_size + p % block_size) * c.n_kv_heads + kvh) * hd;
                const size_t from = (static_cast<size_t>(p) * c.n_kv_heads + kvh) * hd;
                ASSERT_EQ(k_pool[at], k_hist[s][from]) << "K row of sequence " << s << " position " << p;
                ASSERT_EQ(v_pool[at + hd - 1], v_hist[s][from + hd - 1])
                    << "V row of sequence " << s << " position " << p;
            }
            for (int32_t h = 0; h < c.n_heads; ++h) {
                std::vector<float> expected(hd);
                const int32_t kvh = h / (c.n_heads / c.n_kv_heads);
                reference_head(q.data() + (static_cast<size_t>(t) * c.n_heads + h) * hd, k_hist[s], v_hist[s], p,
                               c.n_kv_heads, kvh, hd, scale, expected.data());
                for (int32_t d = 0; d < hd; ++d) {
                    const float got = out[(static_cast<size_t>(t) * c.n_heads + h) * hd + d];
                    ASSERT_NEAR(got, expected[d], 2e-5f + 2e-5f * std::fabs(expected[d]))
                        << "step " << step << " sequence " << s << " position " << p << " head " << h << " dim " << d;
                }
            }
        }
    }
}

std::vector<attention_case> all_cases() {
    struct shape {
        const char* name;
        int32_t n_heads, n_kv_heads, head_dim;
    };
    const shape shapes[] = {
        {"mha_4_heads_dim_16", 4, 4, 16},      {"mqa_4_heads_dim_16", 4, 1, 16},
        {"gqa_8_heads_2_kv_dim_8", 8, 2, 8},   {"gqa_6_heads_3_kv_dim_20", 6, 3, 20},
        {"gqa_4_heads_2_kv_dim_64", 4, 2, 64}, {"mqa_12_heads_dim_24", 12, 1, 24},
        {"mha_3_heads_dim_20", 3, 3, 20},  // MHA through the chunked loop with vector tails
    };
    std::vector<attention_case> cases;
    int i = 0;
    for (const char* kernel : {"scalar", "avx2", "avx512", "auto"}) {
        for (const shape& s : shapes) {
            for (bool paged : {false, true}) {
                cases.push_back({s.name, s.n_heads, s.n_kv_heads, s.head_dim, paged, kernel, (i++ % 2) == 0});
            }
        }
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(gqa, attention_plugin, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<attention_case>& info) {
                             const attention_case& c = info.param;
                             return std::string(c.shape) + (c.paged ? "_paged_" : "_contiguous_") + c.kernel +
                                    (c.threaded ? "_threaded" : "_inline");
                         });

TEST(attention_plugin_twin, matches_the_kernels_reference_attention_on_a_paged_prefill_then_decode) {
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa");
    ASSERT_TRUE(op.ok()) << op.message();
    const int32_t n_heads = 8, n_kv = 2, hd = 32, bs = 4;
    const std::vector<int32_t> lengths = {7, 3, 10};
    // Blocks handed out in a scrambled order, as a paged allocator would after some churn.
    const std::vector<std::vector<int32_t>> tables = {{5, 0, 9}, {3}, {8, 1, 7, 2, 4, 6}};
    std::vector<const int32_t*> table_ptrs = {tables[0].data(), tables[1].data(), tables[2].data()};
    const size_t pool_floats = size_t{10} * bs * n_kv * hd;
    std::vector<float> k_ref(pool_floats, 0.0f), v_ref(pool_floats, 0.0f);
    std::vector<float> k_plug = k_ref, v_plug = v_ref;
    for (int step = 0; step < 2; ++step) {
        std::vector<int32_t> positions, seq_of;
        for (int32_t s = 0; s < 3; ++s) {
            for (int32_t p = 0; p < lengths[s]; ++p) {
                if ((step == 0) == (p < lengths[s] - 1)) {  // step 0: all but the last, step 1: the last
                    positions.push_back(p);
                    seq_of.push_back(s);
                }
            }
        }
        const auto n = static_cast<int32_t>(positions.size());
        const auto q = random_floats(size_t(n) * n_heads * hd, 40 + step, -2.0f, 2.0f);
        const auto k = random_floats(size_t(n) * n_kv * hd, 50 + step, -2.0f, 2.0f);
        const auto v = random_floats(size_t(n) * n_kv * hd, 60 + step);
        std::vector<float> out_ref(size_t(n) * n_heads * hd), out_plug(out_ref.size());
        attention_call call{n,
                            n_heads,
                            n_kv,
                            hd,
                            1.0f / std::sqrt(float(hd)),
                            q.data(),
                            k.data(),
                            v.data(),
                            out_ref.data(),
                            positions.data(),
                            seq_of.data(),
                            3,
                            table_ptrs.data(),
                            bs,
                            k_ref.data(),
                            v_ref.data()};
        ref::attention(call);
        call.out = out_plug.data();
        call.k_pool = k_plug.data();
        call.v_pool = v_plug.data();
        const status st = (*op)->forward(call, threaded_parallel_for(4));
        ASSERT_TRUE(st.ok()) << st.message();
        ASSERT_EQ(k_plug, k_ref);
        ASSERT_EQ(v_plug, v_ref);
        for (size_t i = 0; i < out_ref.size(); ++i) {
            ASSERT_NEAR(out_plug[i], out_ref[i], 1e-5f + 1e-5f * std::fabs(out_ref[i]))
                << "step " << step << " at " << i;
        }
    }
}

TEST(attention_plugin_errors, a_head_count_that_is_not_a_multiple_of_the_kv_heads_fails_the_call_with_a_message) {
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa");
    ASSERT_TRUE(op.ok()) << op.message();
    std::vector<float> x(6 * 4, 0.0f), pool(64 * 4 * 4, 0.0f);
    const int32_t pos = 0, seq = 0, table0 = 0;
    const int32_t* tables[] = {&table0};
    attention_call call{1,        6,    4,    4, 0.5f,   x.data(), x.data(),    x.data(),
                        x.data(), &pos, &seq, 1, tables, 16,       pool.data(), pool.data()};
    const status st = (*op)->forward(call, no_parallel_for());
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.message(),
              "plugin attention/gqa: attention forward failed: n_heads 6 is not a multiple of n_kv_heads 4");
}

TEST(attention_plugin_errors, a_negative_block_in_the_range_a_token_reads_fails_the_call) {
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa");
    ASSERT_TRUE(op.ok()) << op.message();
    std::vector<float> x(8, 0.0f), pool(4 * 4 * 8, 0.0f);
    const int32_t pos = 5, seq = 0;
    const int32_t table[] = {0, -1};
    const int32_t* tables[] = {table};
    attention_call call{1,        1,    1,    8, 0.25f,  x.data(), x.data(),    x.data(),
                        x.data(), &pos, &seq, 1, tables, 4,        pool.data(), pool.data()};
    const status st = (*op)->forward(call, no_parallel_for());
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.message(),
              "plugin attention/gqa: attention forward failed: token 0 at position 5 reads block -1 (entry 1 of "
              "sequence 0's table)");
}

TEST(attention_plugin_errors, a_token_of_an_unknown_sequence_fails_the_call_instead_of_reading_out_of_bounds) {
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa");
    ASSERT_TRUE(op.ok()) << op.message();
    std::vector<float> x(16, 0.0f), pool(64, 0.0f);
    const int32_t pos = 0, seq = 3, table0 = 0;
    const int32_t* tables[] = {&table0};
    attention_call call{1,        1,    1,    16, 0.25f,  x.data(), x.data(),    x.data(),
                        x.data(), &pos, &seq, 1,  tables, 4,        pool.data(), pool.data()};
    const status st = (*op)->forward(call, no_parallel_for());
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("token 0 belongs to sequence 3, expected 0..0"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace troupe::testing
