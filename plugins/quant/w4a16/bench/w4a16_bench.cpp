// troupe_w4a16_bench: quant/w4a16's kernels alone (not a test), beside the limits measured in the same run (the
// read bandwidth of a 256 MiB buffer and the FMA peak of independent AVX-512 chains, on the same threads; measured
// here rather than with kernels/cpu/limits.h so that the plugin tree includes nothing of troupe's):
//
//   decode : y = W x for 1 token (and 4), W = the matrices of the 1B shape's decode step (dim 2048, ffn 5632, 22
//            layers: q, k, v, o, gate, up, down), streamed from memory: GB/s of weights vs the read bandwidth;
//   prefill: 512 tokens through a 2048 x 5632 matrix: GFLOP/s vs the FMA peak.
//
// Per kernel the CPU time of the calling thread is printed too: on a machine shared with other work, wall-clock
// figures fall with the share of the cores the run gets, CPU-time ones much less.
//
// Usage: troupe_w4a16_bench [type q4_1|w4_g64|w4_g128 (default w4_g128)] [n_threads (default 2)]
//                           [kernel avx512|avx512_bf16|avx2|scalar (default avx512)]
// (avx512_bf16: decode with bf16 activations, w4a16_bf16.h, their rounding included in the time; prefill as avx512)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include <immintrin.h>

#include <atomic>
#include <functional>
#include <thread>

#include "plugins/quant/w4a16/w4a16_bf16.h"
#include "plugins/quant/w4a16/w4a16_kernels.h"

namespace {

using namespace troupe::w4a16;

double wall_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double cpu_now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A matrix in the kernels' layout with random codes and small scales.
struct packed_matrix {
    std::vector<uint8_t> storage;  // 64 bytes of slack for alignment
    matrix m{};
    packed_matrix(int64_t n_in, int64_t n_out, int g, uint32_t seed) {
        const size_t stride = layout_row_bytes(n_in, g);
        storage.resize(stride * n_out + 64);
        auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) / 64 * 64);
        std::vector<uint8_t> blocks(static_cast<size_t>(n_in / g) * block_bytes(g));
        std::mt19937 rng(seed);
        for (int64_t r = 0; r < n_out; ++r) {
            for (auto& b : blocks) b = static_cast<uint8_t>(rng());
            for (int64_t b = 0; b < n_in / g; ++b) {
                const uint16_t d = 0x2000, mn = 0xa000;  // 2^-7, -2^-7
                std::memcpy(blocks.data() + b * block_bytes(g), &d, 2);
                std::memcpy(blocks.data() + b * block_bytes(g) + 2, &mn, 2);
            }
            pack_row(blocks.data(), n_in, g, base + r * stride);
        }
        m = matrix{base, n_in, n_out, stride, g};
    }
    // Bytes a product reads (codes and float32 scales; the plugin's prepared_bytes).
    size_t weight_bytes() const { return static_cast<size_t>(m.n_out) * layout_read_bytes(m.n_in, m.g); }
};

// fn(begin, end) over [0, n) in n_threads equal shares, one thread each (the caller takes the first).
void parallel_for(int n_threads, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    std::vector<std::thread> threads;
    for (int i = 1; i < n_threads; ++i)
        threads.emplace_back([&, i] { fn(n * i / n_threads, n * (i + 1) / n_threads); });
    fn(0, n / n_threads);
    for (auto& t : threads) t.join();
}

// GB/s reading a 256 MiB buffer on n_threads threads, the best of 5.
double read_bandwidth(int n_threads) {
    const size_t n = size_t{32} << 20;  // uint64 words
    std::vector<uint64_t> buf(n, 1);
    std::atomic<uint64_t> sink{0};
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
        const double t0 = wall_now();
        parallel_for(n_threads, static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
            uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int64_t i = b; i + 4 <= e; i += 4) {
                s0 += buf[i];
                s1 += buf[i + 1];
                s2 += buf[i + 2];
                s3 += buf[i + 3];
            }
            sink += s0 + s1 + s2 + s3;
        });
        best = std::max(best, static_cast<double>(n * 8) / (wall_now() - t0) / 1e9);
    }
    return sink.load() == 0 ? 0 : best;
}

// n_iter steps of 12 independent AVX-512 FMA chains; returns a value that depends on all of them.
__attribute__((target("avx512f,fma"), noinline)) float fma_chains(int64_t n_iter) {
    __m512 a[12];
    for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(static_cast<float>(i));
    const __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
    for (int64_t it = 0; it < n_iter; ++it) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
    }
    float s = 0;
    for (int i = 0; i < 12; ++i) s += _mm512_reduce_add_ps(a[i]);
    return s;
}

// GFLOP/s of fma_chains on n_threads threads at once, the best of 3.
double fma_peak(int n_threads) {
    constexpr int64_t n_iter = 20000000;
    std::atomic<int> sink{0};
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
        const double t0 = wall_now();
        parallel_for(n_threads, n_threads, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) sink += fma_chains(n_iter) > 0;
        });
        best = std::max(best, 2.0 * 16 * 12 * n_iter * n_threads / (wall_now() - t0) / 1e9);
    }
    return sink.load() < 0 ? 0 : best;
}

struct timing {
    double wall = 1e30, cpu = 1e30;  // best of the repetitions, seconds
};

template <class F>
timing best_of(int reps, F&& f) {
    timing t;
    for (int i = 0; i < reps; ++i) {
        const double w0 = wall_now(), c0 = cpu_now();
        f();
        t.wall = std::min(t.wall, wall_now() - w0);
        t.cpu = std::min(t.cpu, cpu_now() - c0);
    }
    return t;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string type = argc > 1 ? argv[1] : "w4_g128";
    const int n_threads = argc > 2 ? std::atoi(argv[2]) : 2;
    const std::string kernel = argc > 3 ? argv[3] : "avx512";
    const int g = type == "q4_1" ? 32 : type == "w4_g64" ? 64 : type == "w4_g128" ? 128 : 0;
    const bf16_kernel_set* bf16 = kernel == "avx512_bf16" ? avx512_bf16_kernels() : nullptr;
    const kernel_set* k = kernel == "avx512" || kernel == "avx512_bf16" ? avx512_kernels()
                          : kernel == "avx2"                            ? avx2_kernels()
                                                                        : &scalar_kernels();
    if (g == 0 || k == nullptr || n_threads < 1 || (kernel == "avx512_bf16" && bf16 == nullptr)) {
        std::fprintf(stderr,
                     "usage: troupe_w4a16_bench [q4_1|w4_g64|w4_g128] [n_threads] [avx512|avx512_bf16|avx2|scalar]\n");
        return 2;
    }
    const double bandwidth = read_bandwidth(n_threads);
    const double peak = fma_peak(n_threads);
    std::printf("%s, %s kernels, %d threads: read bandwidth %.1f GB/s, FMA peak %.1f GFLOP/s (measured now)\n",
                type.c_str(), bf16 != nullptr ? bf16->name : k->name, n_threads, bandwidth, peak);

    // The 1B shape's decode step: per layer q (2048), k, v (256 each), o (2048), gate, up (5632), down (2048 of 5632).
    const int64_t dim = 2048, ffn = 5632, kv = 256, n_layers = 22;
    std::vector<packed_matrix> step;
    for (int64_t l = 0; l < n_layers; ++l) {
        step.emplace_back(dim, dim, g, 1 + 7 * l);
        step.emplace_back(dim, kv, g, 2 + 7 * l);
        step.emplace_back(dim, kv, g, 3 + 7 * l);
        step.emplace_back(dim, dim, g, 4 + 7 * l);
        step.emplace_back(dim, ffn, g, 5 + 7 * l);
        step.emplace_back(dim, ffn, g, 6 + 7 * l);
        step.emplace_back(ffn, dim, g, 7 + 7 * l);
    }
    size_t step_bytes = 0;
    for (const auto& p : step) step_bytes += p.weight_bytes();
    std::vector<float> x(static_cast<size_t>(ffn) * 16 + 64, 0.25f), y(static_cast<size_t>(ffn) * 512);
    float* xa = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(x.data()) + 63) / 64 * 64);
    // bf16 activations: [16, ffn] words, [16, u_stride] floats, 64-byte aligned
    std::vector<uint16_t> xb_storage(static_cast<size_t>(ffn) * 16 + 32);
    std::vector<float> u_storage(static_cast<size_t>(bf16_u_stride(ffn, g)) * 16 + 16);
    auto* xb = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(xb_storage.data()) + 63) / 64 * 64);
    auto* u = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(u_storage.data()) + 63) / 64 * 64);
    for (int64_t n_tokens : {1, 4}) {
        const timing t = best_of(5, [&] {
            for (const auto& p : step) {
                const matrix& m = p.m;
                if (bf16 != nullptr) {
                    bf16->make_activations(xa, n_tokens, m.n_in, g, xb, u);
                    const bf16_activations a{xb, u, n_tokens, m.n_in, bf16_u_stride(m.n_in, g)};
                    parallel_for(n_threads, (m.n_out + 15) / 16, [&](int64_t b, int64_t e) {
                        bf16->decode(m, a, y.data(), b * 16, std::min(e * 16, m.n_out));
                    });
                    continue;
                }
                parallel_for(n_threads, (m.n_out + 15) / 16, [&](int64_t b, int64_t e) {
                    k->decode(m, xa, n_tokens, y.data(), b * 16, std::min(e * 16, m.n_out));
                });
            }
        });
        const double gbs = static_cast<double>(step_bytes) / t.wall / 1e9;
        std::printf(
            "decode %2lld token%s: %.2f ms per step (%.1f MB of weights): %.1f GB/s = %.1f%% of the read "
            "bandwidth (calling thread's CPU time %.2f ms)\n",
            static_cast<long long>(n_tokens), n_tokens == 1 ? " " : "s", t.wall * 1e3, step_bytes / 1e6, gbs,
            100.0 * gbs / bandwidth, t.cpu * 1e3);
    }

    const int64_t n_tokens = 512, n_pad = 512;
    packed_matrix up(dim, ffn, g, 99);
    std::vector<float> xt(static_cast<size_t>(dim * n_pad), 0.25f);
    const timing t = best_of(3, [&] {
        parallel_for(n_threads, (ffn + k->prefill_rows - 1) / k->prefill_rows, [&](int64_t b, int64_t e) {
            k->prefill(up.m, xt.data(), n_pad, n_tokens, y.data(), b * k->prefill_rows,
                       std::min(e * k->prefill_rows, up.m.n_out));
        });
    });
    const double flops = 2.0 * static_cast<double>(dim) * ffn * n_tokens;
    std::printf(
        "prefill 512 tokens x [%lld, %lld]: %.2f ms: %.1f GFLOP/s = %.1f%% of the FMA peak (calling thread's CPU "
        "time %.2f ms: %.1f GFLOP/s per thread)\n",
        static_cast<long long>(ffn), static_cast<long long>(dim), t.wall * 1e3, flops / t.wall / 1e9,
        100.0 * flops / t.wall / 1e9 / peak, t.cpu * 1e3, flops / n_threads / t.cpu / 1e9);
    return 0;
}
