// Internal: the inner loops of limits.cpp, per level.
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe::cpu::detail {

// Reads n floats (n a multiple of 64) and returns something that depends on all of them. AVX-512: with software
// prefetches into L1, into L2, or both (at two distances).
enum class stream_prefetch { l1, l2, l1_and_l2 };
float read_stream_avx512(const float* p, size_t n, stream_prefetch how);
float read_stream_avx2(const float* p, size_t n);
// Runs `iterations` rounds of independent FMA chains; returns the flops done (and keeps a result alive).
double fma_chains_avx512(int64_t iterations);
double fma_chains_avx2(int64_t iterations);
// Runs `iterations` rounds of independent int8 dot-product chains (AVX-512: vpdpbusd; AVX2: vpmaddubsw +
// vpmaddwd + vpaddd, the int8 arithmetic of that level's kernels); returns the int8 operations done (a
// multiply-add of two bytes counts 2).
double int8_dot_chains_avx512(int64_t iterations);
double int8_dot_chains_avx2(int64_t iterations);
// Q4_0 panels' instruction mix (limits.h: measure_int8_nibble_peak).
double int8_nibble_chains_avx2(int64_t iterations);

}  // namespace troupe::cpu::detail
