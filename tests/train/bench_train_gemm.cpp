// bench_train_gemm: core/train's linear forward and backward at a drafter layer's shapes (the grown 1B's EAGLE
// layer by default), GFLOP/s beside the FMA peak measured in the same run.
//
//   build/tests/train/bench_train_gemm [rows] [in] [out] [threads] [avx2|avx512]   (default 1024 2048 5632 2, the best
//   level; avx2 forces that level's kernels: its products take matmul_for_training's cache blocks)
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/train/gemm.h"
#include "core/train/linear.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/limits.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/train/bench_timing.h"

using troupe::train::bench::best_seconds;

int main(int argc, char** argv) {
    const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 1024;
    const int64_t in = argc > 2 ? std::atoll(argv[2]) : 2048;
    const int64_t out = argc > 3 ? std::atoll(argv[3]) : 5632;
    const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
    troupe::cpu::thread_pool pool(threads);
    if (argc > 5) {
        const std::string level = argv[5];
        troupe::cpu::force_level(level == "avx2" ? troupe::cpu::dispatch_level::avx2
                                                 : troupe::cpu::dispatch_level::avx512);
    }

    troupe::train::bench::normal_values random(1);
    const std::vector<float> x = random(rows * in), w = random(out * in), dy = random(rows * out);
    std::vector<float> y(static_cast<size_t>(rows * out)), dx(static_cast<size_t>(rows * in)),
        dw(static_cast<size_t>(out * in));

    const double peak = troupe::cpu::measure_fma_peak(pool);
    const double flop = 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
    const double fwd = best_seconds(
        3, [&] { troupe::train::linear_forward(x.data(), w.data(), nullptr, y.data(), rows, in, out, pool); });
    const double bdx = best_seconds(3, [&] {
        troupe::train::linear_backward(x.data(), w.data(), dy.data(), dx.data(), nullptr, nullptr, rows, in, out, pool);
    });
    const double bdw = best_seconds(3, [&] {
        troupe::train::linear_backward(x.data(), w.data(), dy.data(), nullptr, dw.data(), nullptr, rows, in, out, pool);
    });
    std::vector<float> wt(w.size());
    const double tr = best_seconds(3, [&] { troupe::train::transpose(w.data(), wt.data(), out, in, &pool); });
    std::printf("linear %lld rows x %lld -> %lld, %d threads, %s kernels; FMA peak %.1f GFLOP/s\n",
                static_cast<long long>(rows), static_cast<long long>(in), static_cast<long long>(out), threads,
                std::string(troupe::cpu::name(troupe::cpu::active_level())).c_str(), peak);
    auto line = [&](const char* what, double s) {
        std::printf("  %-8s %8.2f ms  %7.1f GFLOP/s  %5.1f%% of the FMA peak\n", what, s * 1e3, flop / s * 1e-9,
                    100.0 * flop / s * 1e-9 / peak);
    };
    line("forward", fwd);
    line("dx", bdx);
    line("dw", bdw);
    std::printf("  transpose of the weight %.2f ms (%.1f GB/s read and written)\n", tr * 1e3,
                2.0 * static_cast<double>(w.size()) * sizeof(float) / tr * 1e-9);
    return 0;
}
