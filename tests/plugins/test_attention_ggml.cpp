// attention/gqa's numerics: ggml (attention_ggml.cpp) against a twin that is llama.cpp's own CPU code for the same
// attention, written with the AVX-512 intrinsics its x86 build runs: a KV cache of n_kv rows (the sequence's rows
// rounded up to 32, the rest zero), q·k by ggml_vec_dot_f32, ggml_soft_max_f32 with a -inf mask (ggml_v_expf per
// 16 scores, each 16's _mm512_reduce_add_ps summed in double), then the products by V^T: llamafile's tinyBLAS for a
// step of two tokens or more, ggml_vec_dot_f32 for one. Bit for bit, on a prompt step and the decodes after it,
// over head sizes that take ggml_vec_dot_f32's 64-wide steps, its float tail, or both.
#include <immintrin.h>

#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

#define TWIN_TARGET __attribute__((target("avx512f,avx512dq,fma")))

TWIN_TARGET __m512 ggml_v_expf(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b =
        _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0F)));
    const __m512 res = _mm512_scalef_ps(j, n);
    if (_mm512_kortestz(d, d)) return res;
    const __m512 zero = _mm512_setzero_ps();
    const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ), _mm512_set1_ps(INFINITY), zero);
    return _mm512_mask_blend_ps(d, res, alt);
}

// ggml_vec_dot_f32, AVX-512 (GGML_F32_STEP 64, GGML_F32_ARR 4, GGML_F32x16_REDUCE, float leftovers).
TWIN_TARGET float ggml_vec_dot_f32(int n, const float* x, const float* y) {
    float sumf = 0.0f;
    const int np = n & ~63;
    __m512 sum[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int i = 0; i < np; i += 64) {
        for (int j = 0; j < 4; j++) {
            sum[j] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + j * 16), _mm512_loadu_ps(y + i + j * 16), sum[j]);
        }
    }
    sum[0] = _mm512_add_ps(sum[0], sum[2]);
    sum[1] = _mm512_add_ps(sum[1], sum[3]);
    sum[0] = _mm512_add_ps(sum[0], sum[1]);
    sumf = static_cast<float>(static_cast<double>(_mm512_reduce_add_ps(sum[0])));
    for (int i = np; i < n; ++i) {
        volatile float p = x[i] * y[i];  // the build rounds the product, then adds
        sumf += p;
    }
    return sumf;
}

// ggml_compute_forward_soft_max_f32 on one row of nc (a multiple of 16) scores with an f32 mask.
TWIN_TARGET void ggml_soft_max_row(int nc, const float* sp, const float* mask, float scale, float* dp) {
    std::vector<float> wp(sp, sp + nc);
    for (int i = 0; i < nc; ++i) wp[i] *= scale;
    for (int i = 0; i < nc; ++i) wp[i] += 1.0f * mask[i];
    float max = -INFINITY;
    for (int i = 0; i < nc; ++i) max = std::max(max, wp[i]);
    double sum = 0;
    for (int i = 0; i + 15 < nc; i += 16) {
        const __m512 val = ggml_v_expf(_mm512_sub_ps(_mm512_loadu_ps(wp.data() + i), _mm512_set1_ps(max)));
        _mm512_storeu_ps(dp + i, val);
        sum += static_cast<double>(_mm512_reduce_add_ps(val));
    }
    sum = 1.0 / sum;
    const float v = static_cast<float>(sum);
    for (int i = 0; i < nc; ++i) dp[i] *= v;
}

// tinyBLAS<16, __m512, __m512, float, float, float>: C = sum over k of A[i][l] * B[j][l], 16 FMA lanes, hsum.
TWIN_TARGET float tinyblas_dot(int k, const float* a, const float* b) {
    __m512 c = _mm512_setzero_ps();
    for (int l = 0; l < k; l += 16) c = _mm512_fmadd_ps(_mm512_loadu_ps(a + l), _mm512_loadu_ps(b + l), c);
    return _mm512_reduce_add_ps(c);
}

// llama.cpp's attention for one sequence whose first n_past rows are cached: the step's tokens at n_past.. attend
// causally. k_rows, v_rows: [rows, n_kv_heads, hd] for rows 0 .. n_past + n - 1; q: [n, n_heads, hd].
std::vector<float> ggml_attention(const std::vector<float>& q, const std::vector<float>& k_rows,
                                  const std::vector<float>& v_rows, int n_past, int n, int n_heads, int n_kv_heads,
                                  int hd, float scale) {
    const int n_kv = (n_past + n + 31) / 32 * 32;
    std::vector<float> out(static_cast<size_t>(n) * n_heads * hd);
    std::vector<float> kq(n_kv), p(n_kv), mask(n_kv), vt(n_kv), k_row(hd);
    for (int t = 0; t < n; ++t) {
        for (int h = 0; h < n_heads; ++h) {
            const int kvh = h / (n_heads / n_kv_heads);
            const float* qr = q.data() + (static_cast<size_t>(t) * n_heads + h) * hd;
            for (int j = 0; j < n_kv; ++j) {
                const bool cached = j < n_past + n;  // rows past the sequence are the cache's zeros
                for (int d = 0; d < hd; ++d)
                    k_row[d] = cached ? k_rows[(static_cast<size_t>(j) * n_kv_heads + kvh) * hd + d] : 0.0f;
                kq[j] = ggml_vec_dot_f32(hd, k_row.data(), qr);
                mask[j] = j <= n_past + t ? 0.0f : -INFINITY;
            }
            ggml_soft_max_row(n_kv, kq.data(), mask.data(), scale, p.data());
            for (int d = 0; d < hd; ++d) {
                for (int j = 0; j < n_kv; ++j) {
                    vt[j] = j < n_past + n ? v_rows[(static_cast<size_t>(j) * n_kv_heads + kvh) * hd + d] : 0.0f;
                }
                out[(static_cast<size_t>(t) * n_heads + h) * hd + d] =
                    n >= 2 ? tinyblas_dot(n_kv, vt.data(), p.data()) : ggml_vec_dot_f32(n_kv, vt.data(), p.data());
            }
        }
    }
    return out;
}

struct ggml_case {
    int32_t n_heads, n_kv_heads, head_dim;
};

class attention_ggml_numerics : public ::testing::TestWithParam<ggml_case> {};

TEST_P(attention_ggml_numerics, prompt_and_decodes_are_llama_cpps_attention_bit_for_bit) {
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512dq")) {
        GTEST_SKIP() << "the twin is llama.cpp's AVX-512 code; this CPU lacks AVX-512F/DQ";
    }
    const ggml_case& c = GetParam();
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa", yaml("{numerics: ggml}"));
    ASSERT_TRUE(op.ok()) << op.message();
    const int32_t hd = c.head_dim, kvw = c.n_kv_heads * hd, bs = 4, n_prompt = 75, n_decode = 24;
    const int32_t n_rows = n_prompt + n_decode;
    // Scores of a few units; values of all signs, so ties and cancellations occur in the sums.
    const auto k_rows = random_floats(size_t(n_rows) * kvw, 71, -2.0f, 2.0f);
    const auto v_rows = random_floats(size_t(n_rows) * kvw, 72);
    const auto q_rows = random_floats(size_t(n_rows) * c.n_heads * hd, 73, -2.0f, 2.0f);
    std::vector<int32_t> table((n_rows + bs - 1) / bs);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(9));
    const int32_t* tables[] = {table.data()};
    std::vector<float> k_pool(table.size() * bs * kvw, NAN), v_pool = k_pool;
    const float scale = 1.0f / std::sqrt(float(hd));
    // The prompt as one step, then one token per step (llama.cpp's decode of a prompt and its continuation).
    for (int32_t begin = 0; begin < n_rows; begin = begin == 0 ? n_prompt : begin + 1) {
        const int32_t n = begin == 0 ? n_prompt : 1;
        std::vector<int32_t> positions(n), seq_of(n, 0);
        std::iota(positions.begin(), positions.end(), begin);
        const std::vector<float> q(q_rows.begin() + size_t(begin) * c.n_heads * hd,
                                   q_rows.begin() + size_t(begin + n) * c.n_heads * hd);
        const std::vector<float> k(k_rows.begin() + size_t(begin) * kvw, k_rows.begin() + size_t(begin + n) * kvw);
        const std::vector<float> v(v_rows.begin() + size_t(begin) * kvw, v_rows.begin() + size_t(begin + n) * kvw);
        std::vector<float> out(size_t(n) * c.n_heads * hd, NAN);
        attention_call call{
            n,          c.n_heads,        c.n_kv_heads,  hd, scale,  q.data(), k.data(),      v.data(),
            out.data(), positions.data(), seq_of.data(), 1,  tables, bs,       k_pool.data(), v_pool.data()};
        const status st = (*op)->forward(call, begin == 0 ? threaded_parallel_for(3) : no_parallel_for());
        ASSERT_TRUE(st.ok()) << st.message();
        const auto want = ggml_attention(q, k_rows, v_rows, begin, n, c.n_heads, c.n_kv_heads, hd, scale);
        for (size_t i = 0; i < out.size(); ++i) {
            ASSERT_EQ(out[i], want[i]) << "step at position " << begin << ", token " << i / (c.n_heads * hd) << " head "
                                       << i / hd % c.n_heads << " dim " << i % hd;
        }
    }
}

// Head sizes: 64 (one 64-wide step of ggml_vec_dot_f32), 80 (a step and a float tail), 32 (only the tail); GQA
// groups 2 and 4, MHA.
INSTANTIATE_TEST_SUITE_P(gqa, attention_ggml_numerics,
                         ::testing::Values(ggml_case{4, 2, 64}, ggml_case{8, 2, 80}, ggml_case{2, 2, 32}),
                         [](const ::testing::TestParamInfo<ggml_case>& info) {
                             return std::to_string(info.param.n_heads) + "_heads_" +
                                    std::to_string(info.param.n_kv_heads) + "_kv_dim_" +
                                    std::to_string(info.param.head_dim);
                         });

TEST(attention_ggml_numerics_params, an_unknown_numerics_is_refused_naming_the_choices) {
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa", yaml("{numerics: exact}"));
    ASSERT_FALSE(op.ok());
    EXPECT_NE(op.message().find("numerics"), std::string::npos) << op.message();
    EXPECT_NE(op.message().find("ggml"), std::string::npos) << op.message();
}

}  // namespace
}  // namespace troupe::testing
