// Machine limits measured in the same run as a benchmark, so figures can be printed as a fraction of what
// this machine can do: memory read bandwidth (weights streamed by a decode step), the FMA peak (prefill with
// float arithmetic) and the int8 dot-product peak (prefill with integer arithmetic: the quantized recipe).
#pragma once

#include "kernels/cpu/thread_pool.h"

namespace troupe::cpu {

// GB/s (1e9 bytes per second) reading a buffer far larger than the caches with all of the pool's threads,
// the best of a few runs. Allocates and touches the buffer (256 MiB by default) for the duration.
double measure_read_bandwidth(thread_pool& pool, size_t buffer_bytes = size_t{256} << 20);

// A read stream to time beside a benchmark, step by step: read(bytes) reads that many bytes of a buffer far larger than
// the caches (256 MiB, wrapping around from where the last read stopped) with all of the pool's threads and the
// prefetch the weight kernels use, and returns the seconds it took. Alternated with decode steps, it shows what the
// memory delivered to a plain read at the same moments, where measure_read_bandwidth takes the best of short bursts
// (on a shared machine those can run far ahead of what a second-long decode sees).
class step_read_stream {
public:
    explicit step_read_stream(thread_pool& pool, size_t buffer_bytes = size_t{256} << 20);
    ~step_read_stream();
    step_read_stream(const step_read_stream&) = delete;
    step_read_stream& operator=(const step_read_stream&) = delete;

    double read(size_t bytes);

private:
    struct state;
    thread_pool& pool_;
    state* state_;
};

// GFLOP/s of independent FMA chains kept in registers on all of the pool's threads, with the widest
// vectors of the best available level (an FMA counts 2 flops), the best of a few runs.
double measure_fma_peak(thread_pool& pool);

// GOP/s of independent int8 dot-product chains on all of the pool's threads (a byte multiply-add counts 2):
// AVX-512 VNNI vpdpbusd (64 per instruction) at the avx512 level, vpmaddubsw + vpmaddwd at avx2; 0 at the
// scalar level (no int8 arithmetic to speak of). The best of a few runs.
double measure_int8_peak(thread_pool& pool);

// The same for the 4-bit codes of Q4_0 panels, whose products fit int16 sums (q8_panels_avx2.cpp): at avx2, eight
// vpmaddubsw each added in int16, then one vpmaddwd per 256 multiply-adds, not one per 32 (up to ~1.8x
// measure_int8_peak); at avx512 measure_int8_peak's figure (vpdpbusd for every code width); 0 at scalar.
double measure_int8_nibble_peak(thread_pool& pool);

}  // namespace troupe::cpu
