// bench_train_attention: core/train's attention forward and backward at a drafter layer's shape (the grown 1B's
// EAGLE layer by default: 32 heads over 4 KV heads of 64, segments of 128 positions in 2 passes as
// `--train-depth 2` trains), GFLOP/s beside the FMA peak measured in the same run. FLOPs count the visible
// (query, key) pairs only: 4 head_dim products each forward (scores, outputs), 8 backward.
//
//   build/tests/train/bench_train_attention [segments] [positions] [passes] [threads]   (default 8 128 2 2)
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/train/attention.h"
#include "kernels/cpu/limits.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/train/bench_timing.h"

using troupe::train::bench::best_seconds;

int main(int argc, char** argv) {
    const int64_t segments = argc > 1 ? std::atoll(argv[1]) : 8;
    const int64_t positions = argc > 2 ? std::atoll(argv[2]) : 128;
    const auto passes = static_cast<int32_t>(argc > 3 ? std::atoi(argv[3]) : 2);
    const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
    const troupe::train::attention_shape s{32, 4, 64};
    troupe::cpu::thread_pool pool(threads);

    const int64_t rows_per_segment = positions * passes, n = segments * rows_per_segment;
    std::vector<int64_t> bounds;
    for (int64_t i = 0; i <= segments; ++i) bounds.push_back(i * rows_per_segment);
    troupe::train::bench::normal_values random(1);
    const int64_t qw = s.n_heads * s.head_dim, kvw = s.n_kv_heads * s.head_dim;
    const std::vector<float> q = random(n * qw), k = random(n * kvw), v = random(n * kvw), d_o = random(n * qw);
    std::vector<float> o(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
    troupe::train::attention_cache cache;

    int64_t pairs = 0;  // visible (query row, key row) pairs per head
    std::vector<int64_t> seen;
    for (int64_t i = 0; i < rows_per_segment; ++i) {
        troupe::train::visible_rows(rows_per_segment, passes, i, seen);
        pairs += static_cast<int64_t>(seen.size());
    }
    const double pair_flops = static_cast<double>(pairs * segments * s.n_heads * s.head_dim) * 2.0;

    const double peak = troupe::cpu::measure_fma_peak(pool);
    const double fwd = best_seconds(5, [&] {
        troupe::train::attention_forward(q.data(), k.data(), v.data(), o.data(), bounds, s, cache, pool, passes);
    });
    const double bwd = best_seconds(5, [&] {
        troupe::train::attention_backward(q.data(), k.data(), v.data(), d_o.data(), bounds, s, cache, dq.data(),
                                          dk.data(), dv.data(), pool, passes);
    });
    std::printf(
        "attention %lld segments x %lld positions x %d passes, %lld heads / %lld kv heads of %lld, %d threads; "
        "FMA peak %.1f GFLOP/s\n",
        static_cast<long long>(segments), static_cast<long long>(positions), passes, static_cast<long long>(s.n_heads),
        static_cast<long long>(s.n_kv_heads), static_cast<long long>(s.head_dim), threads, peak);
    auto line = [&](const char* what, double sec, double flop) {
        std::printf("  %-8s %8.2f ms  %7.1f GFLOP/s  %5.1f%% of the FMA peak\n", what, sec * 1e3, flop / sec * 1e-9,
                    100.0 * flop / sec * 1e-9 / peak);
    };
    line("forward", fwd, 2.0 * pair_flops);
    line("backward", bwd, 4.0 * pair_flops);
    return 0;
}
