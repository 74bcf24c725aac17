// attention/gqa's decode split over key positions (plugins/attention/gqa/key_split.h): decodes at contexts of
// hundreds to thousands of keys (many blocks, each split into parts that threads take and a merge joins), beside a
// short decode that is not split, through the ABI on the SIMD kernels, against the scalar reference
// kernels/ref/attention.cpp. Float32 and F16 pools (the F16 case draws K/V values that halves hold exactly, so the
// reference over float32 pools is the same attention), with sliding windows (first key mid-block) and soft-capping.
// The pools start as NaN and the blocks are shuffled, so a part that reads a row outside its range poisons its output.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention_cases.h"
#include "kernels/ref/attention.h"
#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

// Cached positions per sequence (the first call's prefill); the second call decodes one token of each: at 1100
// (four parts), at 600 (two parts) and at 40 (not split).
const std::vector<int32_t> prefixes = {1100, 600, 40};

class attention_split : public ::testing::TestWithParam<attention_kernel_case> {};

TEST_P(attention_split, long_decodes_split_over_positions_match_the_scalar_reference) {
    const attention_kernel_case& c = GetParam();
    if (!cpu_supports(c.kernel)) GTEST_SKIP() << "this CPU lacks " << c.kernel;
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa", yaml(std::string("{kernel: ") + c.kernel + "}"));
    ASSERT_TRUE(op.ok()) << op.message();

    const auto n_seqs = static_cast<int32_t>(prefixes.size());
    const int32_t hd = c.shape.head_dim, bs = 16, kvw = c.shape.n_kv_heads * hd;
    std::vector<std::vector<int32_t>> tables(n_seqs);
    int32_t n_blocks = 0;
    for (const int32_t p : prefixes) n_blocks += p / bs + 1;
    std::vector<int32_t> ids(n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(9));
    for (int32_t s = 0, next = 0; s < n_seqs; ++s) {
        for (int32_t b = 0; b <= prefixes[s] / bs; ++b) tables[s].push_back(ids[next++]);
    }
    std::vector<const int32_t*> table_ptrs;
    for (auto& t : tables) table_ptrs.push_back(t.data());
    const size_t pool_floats = static_cast<size_t>(n_blocks) * bs * kvw;
    std::vector<float> k_pool(pool_floats, NAN), v_pool(pool_floats, NAN);
    if (c.kv == kv_dtype::f16) {  // half the bytes used, each a half NaN
        for (auto* pool : {&k_pool, &v_pool})
            std::fill_n(reinterpret_cast<uint16_t*>(pool->data()), pool_floats, 0x7e00);
    }
    std::vector<float> ref_k_pool(pool_floats, NAN), ref_v_pool(pool_floats, NAN);

    for (int step = 0; step < 2; ++step) {
        std::vector<int32_t> positions, seq_of;
        for (int32_t s = 0; s < n_seqs; ++s) {
            const int32_t begin = step == 0 ? 0 : prefixes[s];
            const int32_t end = step == 0 ? prefixes[s] : prefixes[s] + 1;
            for (int32_t p = begin; p < end; ++p) {
                positions.push_back(p);
                seq_of.push_back(s);
            }
        }
        const auto n = static_cast<int32_t>(positions.size());
        // Scores of a few units, so a soft cap of 2 changes them a lot, and the softmax is far from flat.
        const auto q = random_floats(size_t(n) * c.shape.n_heads * hd, 70 + step, -1.5f, 1.5f);
        const auto k = as_halves(random_floats(size_t(n) * kvw, 80 + step, -1.5f, 1.5f));
        const auto v = as_halves(random_floats(size_t(n) * kvw, 90 + step));
        std::vector<float> out(size_t(n) * c.shape.n_heads * hd, NAN), want = out;
        attention_call call{n,
                            c.shape.n_heads,
                            c.shape.n_kv_heads,
                            hd,
                            1.0f / std::sqrt(float(hd)),
                            q.data(),
                            k.data(),
                            v.data(),
                            out.data(),
                            positions.data(),
                            seq_of.data(),
                            n_seqs,
                            table_ptrs.data(),
                            bs,
                            k_pool.data(),
                            v_pool.data(),
                            c.kv};
        call.softcap = c.softcap;
        call.window = c.window;
        const status st = (*op)->forward(call, threaded_parallel_for(3));
        ASSERT_TRUE(st.ok()) << st.message();
        if (step == 0) {  // the prefill only fills the pools (its kernels have their own tests)
            attention_call ref_call = call;
            ref_call.kv_type = kv_dtype::f32;
            ref_call.out = want.data();
            ref_call.k_pool = ref_k_pool.data();
            ref_call.v_pool = ref_v_pool.data();
            ref::attention(ref_call);
            continue;
        }
        attention_call ref_call = call;
        ref_call.kv_type = kv_dtype::f32;
        ref_call.out = want.data();
        ref_call.k_pool = ref_k_pool.data();
        ref_call.v_pool = ref_v_pool.data();
        ref::attention(ref_call);
        for (int32_t t = 0; t < n; ++t) {
            for (int32_t i = 0; i < c.shape.n_heads * hd; ++i) {
                const size_t at = static_cast<size_t>(t) * c.shape.n_heads * hd + i;
                ASSERT_NEAR(out[at], want[at], 2e-5f + 2e-5f * std::fabs(want[at]))
                    << "decode at position " << positions[t] << " (sequence " << seq_of[t] << ") head " << i / hd
                    << " dim " << i % hd;
            }
        }
    }
}

// GQA with a small head, the 110M shape (MHA, 12 heads of 64) and the 1B shape (32 heads on 4 kv heads). (window,
// softcap): none; a window of 700 (the decode at 1100 starts mid-block, still split; the one at 600 is inside it) with
// Gemma 2's cap of 50; a cap of 2 alone.
INSTANTIATE_TEST_SUITE_P(gqa, attention_split,
                         ::testing::ValuesIn(attention_kernel_cases({"avx2", "avx512"}, {kv_dtype::f32, kv_dtype::f16},
                                                                    {{"gqa_4_heads_2_kv_dim_32", 4, 2, 32},
                                                                     {"mha_12_heads_dim_64", 12, 12, 64},
                                                                     {"gqa_32_heads_4_kv_dim_64", 32, 4, 64}},
                                                                    {{0, 0.0f}, {700, 50.0f}, {0, 2.0f}})),
                         case_name);

}  // namespace
}  // namespace troupe::testing
