#include "kernels/cpu/limits_kernels.h"

#if defined(__AVX512F__)
#include <immintrin.h>

namespace troupe::cpu::detail {

namespace {

// Hint 8 KiB ahead, and (Far > 0) an L2 hint Far bytes ahead.
template <int Hint, int Far = 0>
float read_stream(const float* p, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 64) {
        const char* ahead = reinterpret_cast<const char*>(p + i) + 8192;
        _mm_prefetch(ahead, static_cast<_mm_hint>(Hint));
        _mm_prefetch(ahead + 64, static_cast<_mm_hint>(Hint));
        _mm_prefetch(ahead + 128, static_cast<_mm_hint>(Hint));
        _mm_prefetch(ahead + 192, static_cast<_mm_hint>(Hint));
        if constexpr (Far > 0) {
            const char* far = reinterpret_cast<const char*>(p + i) + Far;
            _mm_prefetch(far, _MM_HINT_T1);
            _mm_prefetch(far + 64, _MM_HINT_T1);
            _mm_prefetch(far + 128, _MM_HINT_T1);
            _mm_prefetch(far + 192, _MM_HINT_T1);
        }
        a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

}  // namespace

float read_stream_avx512(const float* p, size_t n, stream_prefetch how) {
    // Software prefetch 8 KiB ahead: on the machines measured, the hardware prefetcher alone leaves a thread
    // well below what the memory delivers (the matmul kernels prefetch the same way). Into L1 (T0), into L2 (T1), or
    // into L1 8 KiB ahead and L2 32 KiB ahead: the kernels use each, and which reads fastest differs by CPU, so the
    // probe tries them all (limits.cpp).
    switch (how) {
        case stream_prefetch::l1:
            return read_stream<_MM_HINT_T0>(p, n);
        case stream_prefetch::l2:
            return read_stream<_MM_HINT_T1>(p, n);
        case stream_prefetch::l1_and_l2:
            break;
    }
    return read_stream<_MM_HINT_T0, 32768>(p, n);
}

double fma_chains_avx512(int64_t iterations) {
    constexpr int k_chains = 16;  // > latency (4) x pipes (2): every FMA pipe busy every cycle
    __m512 acc[k_chains];
    for (int c = 0; c < k_chains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c) * 1e-3f);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
        for (int c = 0; c < k_chains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    }
    __m512 s = acc[0];
    for (int c = 1; c < k_chains; ++c) s = _mm512_add_ps(s, acc[c]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return static_cast<double>(iterations) * k_chains * 16 * 2;
}

double int8_dot_chains_avx512(int64_t iterations) {
    constexpr int k_chains = 16;  // > latency x pipes: every VNNI pipe busy every cycle
    __m512i acc[k_chains];
    for (int c = 0; c < k_chains; ++c) acc[c] = _mm512_set1_epi32(c);
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
        for (int c = 0; c < k_chains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], a, b);
    }
    __m512i s = acc[0];
    for (int c = 1; c < k_chains; ++c) s = _mm512_add_epi32(s, acc[c]);
    volatile int sink = _mm512_reduce_add_epi32(s);
    (void)sink;
    return static_cast<double>(iterations) * k_chains * 64 * 2;
}

}  // namespace troupe::cpu::detail
#else
namespace troupe::cpu::detail {
float read_stream_avx512(const float*, size_t, stream_prefetch) {
    return 0;
}
double fma_chains_avx512(int64_t) {
    return 0;
}
double int8_dot_chains_avx512(int64_t) {
    return 0;
}
}  // namespace troupe::cpu::detail
#endif
