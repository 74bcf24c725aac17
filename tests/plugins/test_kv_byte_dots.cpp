// The integer KV kernels' building blocks against their scalar definitions: the byte dot products (vpdpbusd with
// VNNI, and its vpmaddwd emulation without, which this CPU may not otherwise run) on extreme and random bytes, and
// the vectorized query quantization against kv_query.h's reference on odd lengths (their codes must be equal: the
// kernels' scalar twins rely on it).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "plugins/quant/kv_common/kv_query.h"

namespace troupe::testing {

void kv_dot_bytes(bool vnni, const uint8_t* a, const int8_t* b, const int32_t* acc, int32_t* out);
float kv_quantize_query_avx512(const float* q, const float* k_scales, int32_t n, float scale, int8_t* codes,
                               int32_t* sum);

float kv_quantize_query_avx2(const float* q, const float* k_scales, int32_t n, float scale, int8_t* codes,
                             int32_t* sum);

namespace {

bool has_avx2() {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

bool has_avx512() {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
}

TEST(kv_byte_dots, both_products_equal_the_sum_of_four_unsigned_by_signed_bytes_per_lane) {
    if (!has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512F/BW/VL";
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int round = 0; round < 200; ++round) {
        uint8_t a[64];
        int8_t b[64];
        int32_t acc[16];
        for (int i = 0; i < 64; ++i) {
            // The first rounds take the extremes, where a saturating 16-bit pair sum would show.
            a[i] = round == 0 ? 255 : round == 1 ? 0 : static_cast<uint8_t>(byte(rng));
            b[i] = round == 0 ? -128 : round == 1 ? 127 : static_cast<int8_t>(byte(rng) - 128);
        }
        for (int l = 0; l < 16; ++l) acc[l] = round * 1000 - l;
        int32_t want[16];
        for (int l = 0; l < 16; ++l) {
            want[l] = acc[l];
            for (int i = 0; i < 4; ++i) want[l] += a[4 * l + i] * b[4 * l + i];
        }
        int32_t got[16];
        kv_dot_bytes(false, a, b, acc, got);
        for (int l = 0; l < 16; ++l) EXPECT_EQ(got[l], want[l]) << "vpmaddwd pairs, round " << round << " lane " << l;
        if (__builtin_cpu_supports("avx512vnni")) {
            kv_dot_bytes(true, a, b, acc, got);
            for (int l = 0; l < 16; ++l) EXPECT_EQ(got[l], want[l]) << "vpdpbusd, round " << round << " lane " << l;
        }
    }
}

// Each level's query codes against quantize_query_ref (codes, scale and sum equal).
void expect_reference_query_codes(float (*quantize)(const float*, const float*, int32_t, float, int8_t*, int32_t*)) {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> positive(0.001f, 0.1f);
    for (const int32_t n : {4, 8, 20, 24, 64, 100, 128, 256}) {
        for (int round = 0; round < 20; ++round) {
            std::vector<float> q(n), ks(n);
            for (int32_t c = 0; c < n; ++c) {
                q[c] = round == 0 ? 0.0f : normal(rng);     // round 0: a zero query (scale 0, every code 0)
                ks[c] = round == 1 ? 1.0f : positive(rng);  // round 1: a regular grid of values
                if (round == 1) q[c] = static_cast<float>(c % 255 - 127) * 0.5f;
            }
            std::vector<int8_t> want(n), got(n);
            const kv::quantized_query ref = kv::quantize_query_ref(q.data(), ks.data(), n, 0.125f, want.data());
            int32_t sum = 0;
            const float scale = quantize(q.data(), ks.data(), n, 0.125f, got.data(), &sum);
            EXPECT_EQ(scale, ref.scale) << "n " << n << " round " << round;
            EXPECT_EQ(sum, ref.sum) << "n " << n << " round " << round;
            EXPECT_EQ(got, want) << "n " << n << " round " << round;
        }
    }
}

TEST(kv_byte_dots, the_vectorized_query_codes_equal_the_references_on_odd_lengths) {
    if (!has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512F/BW/VL";
    expect_reference_query_codes(kv_quantize_query_avx512);
}

TEST(kv_byte_dots, the_avx2_query_codes_equal_the_references_on_odd_lengths) {
    if (!has_avx2()) GTEST_SKIP() << "this CPU has no AVX2/FMA/F16C";
    expect_reference_query_codes(kv_quantize_query_avx2);
}

}  // namespace
}  // namespace troupe::testing
