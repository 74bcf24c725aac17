#include "plugins/common/dense_ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "plugins/common/plugin_support.h"

namespace troupe::spec_common {
namespace {

float dot_scalar(const float* a, const float* b, int64_t n) {
    float acc[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
    }
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(),
           acc3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    const __m256 sum8 = _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(sum8), _mm256_extractf128_ps(sum8, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
    float s = _mm_cvtss_f32(s4);
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

using dot_fn = float (*)(const float*, const float*, int64_t);

dot_fn choose_dot() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? dot_avx2 : dot_scalar;
}

}  // namespace

float dot(const float* a, const float* b, int64_t n) {
    static const dot_fn fn = choose_dot();
    return fn(a, b, n);
}

int32_t matmul(const troupe_parallel* parallel, const float* x, int64_t n, const float* w, const float* b, float* y,
               int64_t in, int64_t out) {
    return for_each_output(parallel, n, in, out, [&](int64_t o) {
        const float* wr = w + o * in;
        const float bias = b != nullptr ? b[o] : 0.0f;
        for (int64_t r = 0; r < n; ++r) y[r * out + o] = dot(x + r * in, wr, in) + bias;
    });
}

void rmsnorm(const float* x, const float* weight, float* y, int64_t n, int64_t dim, float eps) {
    for (int64_t r = 0; r < n; ++r) {
        const float* xr = x + r * dim;
        double ss = 0;
        for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
        const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
        float* yr = y + r * dim;
        for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * weight[i];
    }
}

void log_softmax(const float* x, float* out, int64_t n) {
    float max = x[0];
    for (int64_t i = 1; i < n; ++i) max = std::max(max, x[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - max));
    const auto log_z = static_cast<float>(static_cast<double>(max) + std::log(sum));
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] - log_z;
}

std::vector<std::pair<int32_t, float>> top_k(const float* x, int64_t n, int32_t k) {
    k = static_cast<int32_t>(std::min<int64_t>(std::max(0, k), n));
    std::vector<std::pair<int32_t, float>> best;
    best.reserve(static_cast<size_t>(k) + 1);
    const auto better = [](const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) {
        return a.second != b.second ? a.second > b.second : a.first < b.first;
    };
    for (int64_t i = 0; i < n && k > 0; ++i) {
        const std::pair<int32_t, float> item{static_cast<int32_t>(i), x[i]};
        if (static_cast<int32_t>(best.size()) == k && !better(item, best.back())) continue;
        best.insert(std::upper_bound(best.begin(), best.end(), item, better), item);
        if (static_cast<int32_t>(best.size()) > k) best.pop_back();
    }
    return best;
}

}  // namespace troupe::spec_common
