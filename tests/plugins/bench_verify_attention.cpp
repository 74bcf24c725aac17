// Benchmark (not a test): one layer's attention for a speculative step of one sequence at a long context, through
// attention/gqa's ABI on F32 or F16 pools: the step's n tokens (the last accepted one and its drafts, consecutive
// positions) in one call, beside the same tokens as n one-token decode calls and beside one plain decode. What
// verification costs in attention, against the decode it stands in for; with n = 1, what a decode's attention costs.
//
//   build/tests/plugins/bench_verify_attention [context (4096) [n tokens (6) [n_heads (32) [n_kv_heads (8)
//                                              [threads (2) [f32 | f16 (f32) [kernel (auto)]]]]]]]
//
// head_dim 64. Times are CPU time per call, all threads together (best of 10 alternated batches of 5), and beside them
// the wall time (best of the same batches): this bench starts its threads for every parallel_for (threads_for), so with
// 2 threads the wall time carries ~3 thread starts per call, which the engine's pool does not pay; the pools are as
// large as the context: one call reads context x n_kv_heads x 64 x 2 (K, V) x 4 (F32) or 2 (F16) bytes.
// TROUPE_PLUGIN_DIR picks another plugin folder (an older build's, to compare); kernel is the plugin's params.kernel
// (auto, avx512, avx2, scalar), to time the AVX2 kernels on an AVX-512 machine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/model/ops.h"
#include "core/plugin_host/plugin_host.h"
#include "kernels/cpu/huge_page_buffer.h"

namespace troupe {
namespace {

constexpr int32_t head_dim = 64, block_size = 16;

// The process's CPU time in ms (all its threads): on a shared machine, time spent descheduled does not count.
double cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// Splits [0, n) over `n_threads` threads (the caller's one of them), as the engine's pool does.
parallel_for_fn threads_for(int n_threads) {
    return [n_threads](int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
        std::vector<std::thread> others;
        for (int i = 1; i < n_threads; ++i) {
            const int64_t b = n * i / n_threads, e = n * (i + 1) / n_threads;
            if (b < e) others.emplace_back([&fn, b, e] { fn(b, e); });
        }
        if (n / n_threads > 0) fn(0, n / n_threads);
        for (auto& t : others) t.join();
    };
}

// n elements of 0.5 (floats, or halves) in huge pages, as the engine's KV memory is (cpu::huge_page_buffer).
cpu::huge_page_buffer pool_of_halves(size_t n, bool f16) {
    cpu::huge_page_buffer pool;
    if (!pool.allocate(n * (f16 ? 2 : 4))) throw std::bad_alloc();
    if (f16) {
        std::fill_n(reinterpret_cast<uint16_t*>(pool.data()), n, uint16_t{0x3800});
    } else {
        std::fill_n(reinterpret_cast<float*>(pool.data()), n, 0.5f);
    }
    return pool;
}

int run(int32_t ctx, int32_t n_tokens, int32_t n_heads, int32_t n_kv_heads, int n_threads, bool f16,
        const std::string& kernel) {
    const char* dir = std::getenv("TROUPE_PLUGIN_DIR");
    plugin_host host(plugin_host_options{dir != nullptr ? dir : TROUPE_DEFAULT_PLUGIN_DIR});
    YAML::Node params;
    params["kernel"] = kernel;
    auto gqa = host.load_attention("gqa", params);
    if (!gqa.ok()) return std::fprintf(stderr, "%s\n", gqa.message().c_str()), 1;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto random_floats = [&](size_t n) {
        std::vector<float> v(n);
        for (float& x : v) x = dist(rng);
        return v;
    };
    std::vector<int32_t> table(ctx / block_size + 1);
    for (size_t b = 0; b < table.size(); ++b) table[b] = static_cast<int32_t>(b);
    const int32_t* tables[] = {table.data()};
    const size_t kvw = static_cast<size_t>(n_kv_heads) * head_dim;
    // Pools of 0.5 (F16 0x3800), as floats or halves, in huge pages as the engine's KV memory is (4 KiB pages
    // measured ~2x slower once the pools outgrow the caches).
    const size_t n_pool = table.size() * block_size * kvw;
    const cpu::huge_page_buffer k_pool = pool_of_halves(n_pool, f16), v_pool = pool_of_halves(n_pool, f16);
    const auto q = random_floats(static_cast<size_t>(n_tokens) * n_heads * head_dim);
    const auto k = random_floats(static_cast<size_t>(n_tokens) * kvw), v = random_floats(k.size());
    std::vector<float> out(q.size());
    std::vector<int32_t> positions(n_tokens), seq_of(n_tokens, 0);
    for (int32_t i = 0; i < n_tokens; ++i) positions[i] = ctx - n_tokens + i;
    const parallel_for_fn par = threads_for(n_threads);

    // Tokens [first, first + n) of the step in one call.
    auto call = [&](int32_t first, int32_t n) {
        attention_call a{};
        a.n_tokens = n, a.n_heads = n_heads, a.n_kv_heads = n_kv_heads, a.head_dim = head_dim, a.scale = 0.125f;
        a.q = q.data() + static_cast<size_t>(first) * n_heads * head_dim, a.k = k.data() + first * kvw;
        a.v = v.data() + first * kvw, a.out = out.data() + static_cast<size_t>(first) * n_heads * head_dim;
        a.positions = positions.data() + first, a.seq_of = seq_of.data(), a.n_seqs = 1, a.block_tables = tables;
        a.block_size = block_size, a.k_pool = reinterpret_cast<float*>(k_pool.data()),
        a.v_pool = reinterpret_cast<float*>(v_pool.data());
        a.kv_type = f16 ? kv_dtype::f16 : kv_dtype::f32;
        (void)(*gqa)->forward(a, par);
    };
    struct variant {
        std::string name;
        std::function<void()> run;
        double best_ms = 1e30;
        double best_wall_ms = 1e30;
    };
    std::vector<variant> variants = {{"one decode (the last token)", [&] { call(n_tokens - 1, 1); }},
                                     {"the step's tokens in one call", [&] { call(0, n_tokens); }},
                                     {"the step's tokens as decodes", [&] {
                                          for (int32_t i = 0; i < n_tokens; ++i) call(i, 1);
                                      }}};
    for (int round = 0; round < 10; ++round) {
        for (variant& x : variants) {
            const double t0 = cpu_ms();
            const auto w0 = std::chrono::steady_clock::now();
            for (int i = 0; i < 5; ++i) x.run();
            x.best_ms = std::min(x.best_ms, (cpu_ms() - t0) / 5);
            x.best_wall_ms =
                std::min(x.best_wall_ms,
                         std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count() / 5);
        }
    }
    std::printf(
        "context %d, %d tokens of one sequence, %d heads, %d kv heads, head_dim %d, %s pools (%.1f MB of K and V), "
        "%d threads: CPU ms per call, all threads (and wall ms)\n",
        ctx, n_tokens, n_heads, n_kv_heads, head_dim, f16 ? "F16" : "F32", (f16 ? 2.0 : 4.0) * 2 * ctx * kvw / 1e6,
        n_threads);
    for (const variant& x : variants) {
        std::printf("  %-30s %8.3f ms  (%.2fx one decode)  wall %8.3f ms\n", x.name.c_str(), x.best_ms,
                    x.best_ms / variants[0].best_ms, x.best_wall_ms);
    }
    return 0;
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
    return troupe::run(argc > 1 ? std::atoi(argv[1]) : 4096, argc > 2 ? std::atoi(argv[2]) : 6,
                       argc > 3 ? std::atoi(argv[3]) : 32, argc > 4 ? std::atoi(argv[4]) : 8,
                       argc > 5 ? std::atoi(argv[5]) : 2, argc > 6 && std::string(argv[6]) == "f16",
                       argc > 7 ? argv[7] : "auto");
}
