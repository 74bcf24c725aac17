// gemm_bench (a measuring tool, not a test): prefill-sized products of the quantized recipe through cpu::matmul
// (activation quantization, the pool's split and the kernels, as a model step runs them), beside the int8
// dot-product peak measured in the same run. For Q4_K / Q6_K it also runs the level's dot kernels on the same
// work (what prefill ran before the integer GEMM), interleaved rep by rep with the GEMM so both see the same
// machine; for Q8_0 / Q4_0 the row form and the panel form (q8_panels.h, the loader's default), likewise.
//
//   gemm_bench [N_THREADS (2)] [N_TOKENS (64)] [REPS (20)] [N_IN (2048)] [N_OUT (5632)] [LEVEL (best): avx2 | avx512]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/limits.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/q8_panels.h"
#include "kernels/ref/quants.h"

namespace troupe {
namespace {

struct stored {
    std::vector<uint8_t> bytes;
    matmul_weight view;
};

stored random_matrix(ggml_type t, int64_t n_in, int64_t n_out, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 0.05f);
    stored m;
    const size_t rb = row_bytes(t, n_in);
    m.bytes.resize(rb * n_out);
    std::vector<float> row(n_in);
    for (int64_t r = 0; r < n_out; ++r) {
        for (float& v : row) v = normal(rng);
        ref::quantize_row(t, row.data(), m.bytes.data() + r * rb, n_in);
    }
    m.view = matmul_weight{t, m.bytes.data(), n_in, n_out, rb};
    return m;
}

double seconds(const std::function<void()>& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs the variants interleaved rep by rep; prints the best time of each as GOP/s and share of the peak.
void compare(const char* title, const std::vector<std::pair<std::string, std::function<void()>>>& variants, double ops,
             double peak, int reps) {
    std::vector<double> best(variants.size(), 1e30);
    for (auto& v : variants) v.second();  // warm-up
    for (int r = 0; r < reps; ++r) {
        for (size_t i = 0; i < variants.size(); ++i) best[i] = std::min(best[i], seconds(variants[i].second));
    }
    for (size_t i = 0; i < variants.size(); ++i) {
        const double gops = ops / best[i] / 1e9;
        std::printf("%-8s %-26s %9.3f ms %8.1f GOP/s %6.1f%% of the int8 peak\n", title, variants[i].first.c_str(),
                    best[i] * 1e3, gops, 100.0 * gops / peak);
    }
}

int run(int n_threads, int64_t n_tokens, int reps, int64_t n_in, int64_t n_out) {
    cpu::thread_pool pool(n_threads);
    const double peak = cpu::measure_int8_peak(pool);
    std::printf("gemm_bench: [%lld x %lld] weights, %lld tokens, %d threads (%s); int8 dot-product peak %.1f GOP/s\n",
                static_cast<long long>(n_out), static_cast<long long>(n_in), static_cast<long long>(n_tokens),
                n_threads, std::string(cpu::name(cpu::active_level())).c_str(), peak);
    std::mt19937 rng(1);
    std::vector<float> x(n_tokens * n_in), y(n_tokens * n_out);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    const double ops = 2.0 * static_cast<double>(n_tokens * n_in * n_out);
    const auto& k = cpu::active_level() == cpu::dispatch_level::avx512 ? cpu::detail::avx512_kernels()
                    : cpu::active_level() == cpu::dispatch_level::avx2 ? cpu::detail::avx2_kernels()
                                                                       : cpu::detail::scalar_kernels();
    for (const ggml_type t : {ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k}) {
        const stored m = random_matrix(t, n_in, n_out, rng);
        std::vector<std::pair<std::string, std::function<void()>>> variants;
        variants.emplace_back("cpu::matmul (rows)", [&] { cpu::matmul(m.view, x.data(), y.data(), n_tokens, pool); });
        cpu::aligned_buffer panels;
        matmul_weight with_panels = m.view;
        if (cpu::q8_panels_supported(t, cpu::activation_recipe::quantized)) {
            with_panels.codes = cpu::pack_q8_panels(m.view, panels.reserve(cpu::q8_panels_bytes(m.view)), &pool);
            with_panels.panels = panels.reserve(0);
            variants.emplace_back("cpu::matmul (panels)",
                                  [&] { cpu::matmul(with_panels, x.data(), y.data(), n_tokens, pool); });
        }
        // Q4_K / Q6_K: the level's kernels on activations quantized once (captured by copy: they outlive this block).
        if ((t == ggml_type::q4_k || t == ggml_type::q6_k) && k.gemm_kquant != nullptr) {
            variants[0].first = "cpu::matmul (k GEMM)";
            auto xq = std::make_shared<std::vector<block_q8_k>>(n_tokens * n_in / qk_k);
            for (int64_t i = 0; i < n_tokens; ++i)
                k.quantize_q8_k(x.data() + i * n_in, xq->data() + i * n_in / qk_k, n_in);
            const cpu::detail::prepared_x px{xq->data(), static_cast<size_t>(n_in / qk_k) * sizeof(block_q8_k)};
            const auto split = [&pool, &m, &y, px, xq, n_out, n_tokens](auto kernel, int64_t per_item) {
                const int64_t n_items = (n_out + per_item - 1) / per_item;
                pool.parallel_for(n_items, [&](int64_t b, int64_t e) {
                    kernel(m.view, px, y.data(), n_out, n_tokens, b * per_item, std::min(n_out, e * per_item));
                });
            };
            variants.emplace_back("dot kernels (no quant)", [split, &k] { split(k.rows, 16); });
            variants.emplace_back("k GEMM (no quant)", [split, &k] { split(k.gemm_kquant, k.gemm_kquant_rows); });
        }
        compare(std::string(traits(t).name).c_str(), variants, ops, peak, reps);
    }
    return 0;
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
    const int n_threads = argc > 1 ? std::atoi(argv[1]) : 2;
    const int64_t n_tokens = argc > 2 ? std::atoll(argv[2]) : 64;
    const int reps = argc > 3 ? std::atoi(argv[3]) : 20;
    const int64_t n_in = argc > 4 ? std::atoll(argv[4]) : 2048;
    const int64_t n_out = argc > 5 ? std::atoll(argv[5]) : 5632;
    if (argc > 6) {
        for (troupe::cpu::dispatch_level level : troupe::cpu::available_levels())
            if (troupe::cpu::name(level) == argv[6]) troupe::cpu::force_level(level);
        if (troupe::cpu::name(troupe::cpu::active_level()) != argv[6]) {
            std::fprintf(stderr, "gemm_bench: level %s is not available here\n", argv[6]);
            return 1;
        }
    }
    return troupe::run(n_threads, n_tokens, reps, n_in, n_out);
}
