// troupe_kernels_bench: kernel figures for a 110M-parameter Llama shape (dim 768, ffn 2048, 12 layers,
// vocab 32000), printed beside the limits measured in the same run (not a test).
//
//   decode: one token through every matmul of the model (7 per layer + the output matrix), weights
//           streamed from memory: GB/s of weights read vs the measured read bandwidth.
//   prefill: 512 tokens through the same matmuls: GFLOP/s vs the measured FMA peak.
//
// Usage: troupe_kernels_bench [n_threads (default 2)] [prefill tokens (default 512)] [rounds (default 3)]
//                             [types, e.g. Q8_0,Q4_0 (default all; Q2_K, Q3_K, Q5_K by name only)]
//                             [level and / or shape, e.g. avx2,1B: avx2 | scalar (default: the CPU's best);
//                              110M (default) | 1B]
// (Q8_0 and Q4_0 prefill run the integer GEMM: their GFLOP/s count multiply-adds as 2 flops like the others
// but are not bound by the float FMA peak.) Rows with activations "float" run the float-activation recipe
// (cpu::activation_recipe::float32: weight blocks dequantized in registers for decode, the float GEMM on
// dequantized panels for prefill); "quant" rows llama.cpp's recipe. Rows with form "panels" run Q8_0 / Q4_0
// weights pre-packed into 16-row panels (cpu/q8_panels.h): one integer kernel for every token count ("quant"),
// and with float activations ("float") the W8A16 panel kernel, for every token count too; Q4_K / Q6_K weights
// re-laid into k-quant panels (cpu/kquant_panels.h: each group of four rows one stream; the same kernels' arithmetic).
//
// Then the step time of the whole model for 1, 2, 4, 8, 16 and 32 tokens (a decode step serving that many
// streams), rows vs panels, and the ratio of the 16-token step to the 1-token step: the cost of serving 16
// streams at once instead of one (16 would be no batching gain at all, 1 a free batch).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/limits.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q8_panels.h"
#include "kernels/cpu/weight_panels.h"
#include "kernels/ref/quants.h"

namespace {

using namespace troupe;
using clock_type = std::chrono::steady_clock;

struct shape {
    int64_t n_in, n_out;
};

// The matmuls of one decode step, in order: per layer q, k, v, o, gate, up, down; then the output.
std::vector<shape> model_matmuls(int64_t dim = 768, int64_t ffn = 2048, int64_t vocab = 32000, int64_t n_layers = 12) {
    std::vector<shape> s;
    for (int64_t l = 0; l < n_layers; ++l) {
        for (int i = 0; i < 4; ++i) s.push_back({dim, dim});
        s.push_back({dim, ffn});
        s.push_back({dim, ffn});
        s.push_back({ffn, dim});
    }
    s.push_back({dim, vocab});
    return s;
}

// Weights of every matmul in their own memory. Distinct random rows are quantized once per shape (up to
// 512 rows) and repeated: the contents do not change the speed, the footprint does.
struct model_weights {
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<matmul_weight> views;
    size_t total_bytes = 0;
};

model_weights make_weights(ggml_type type, const std::vector<shape>& shapes) {
    model_weights m;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (const shape& s : shapes) {
        const size_t stride = row_bytes(type, s.n_in);
        const int64_t n_distinct = std::min<int64_t>(512, s.n_out);
        std::vector<float> rows(n_distinct * s.n_in);
        for (auto& v : rows) v = normal(rng);
        std::vector<uint8_t> buf(stride * s.n_out);
        for (int64_t r = 0; r < n_distinct; ++r)
            ref::quantize_row(type, rows.data() + r * s.n_in, buf.data() + r * stride, s.n_in);
        for (int64_t r = n_distinct; r < s.n_out; ++r)
            std::memcpy(buf.data() + r * stride, buf.data() + (r % n_distinct) * stride, stride);
        m.total_bytes += buf.size();
        m.bytes.push_back(std::move(buf));
        m.views.push_back(matmul_weight{type, m.bytes.back().data(), s.n_in, s.n_out, stride});
    }
    return m;
}

// The same weights with their panel form (views gain `panels`; the rows stay for the other paths).
struct panel_weights {
    std::vector<std::unique_ptr<cpu::aligned_buffer>> panels;
    std::vector<matmul_weight> views;
    size_t total_bytes = 0;
};

panel_weights make_panels(const model_weights& m, cpu::thread_pool& pool) {
    panel_weights p;
    for (const matmul_weight& w : m.views) {
        const size_t n = cpu::panels_bytes(w);
        p.panels.push_back(std::make_unique<cpu::aligned_buffer>());
        void* dst = p.panels.back()->reserve(n);
        const panel_codes codes = cpu::pack_panels(w, dst, &pool);
        p.views.push_back(w);
        p.views.back().panels = dst;
        p.views.back().codes = codes;
        p.total_bytes += n;
    }
    return p;
}

double seconds_since(clock_type::time_point t) {
    return std::chrono::duration<double>(clock_type::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
    const int n_threads = argc > 1 ? std::atoi(argv[1]) : 2;
    const int64_t n_prefill = argc > 2 ? std::atoll(argv[2]) : 512;
    const int n_rounds = argc > 3 ? std::atoi(argv[3]) : 3;
    // The 5th argument: words separated by commas, a lower level's kernels on this CPU (avx2 or scalar: the AVX2 ones
    // on an AVX-512 machine, to compare) and / or the shape: 110M (default) or 1B (`troupe synth --shape 1B`: dim 2048,
    // ffn 5632, 22 layers; vocab 32000 here), whose rows are 3-7x longer.
    bool shape_1b = false;
    if (argc > 5) {
        const std::string words = std::string(argv[5]) + ",";
        for (size_t at = 0, comma; (comma = words.find(',', at)) != std::string::npos; at = comma + 1) {
            const std::string word = words.substr(at, comma - at);
            if (word == "1B" || word == "110M") {
                shape_1b = word == "1B";
            } else if (word == "avx2" || word == "scalar") {
                cpu::force_level(word == "avx2" ? cpu::dispatch_level::avx2 : cpu::dispatch_level::scalar);
            } else {
                std::fprintf(stderr, "troupe_kernels_bench: '%s': avx2, scalar, 110M or 1B\n", word.c_str());
                return 2;
            }
        }
    }
    cpu::thread_pool pool(n_threads);
    std::printf("troupe_kernels_bench: %s Llama shape (dim %d, ffn %d, %d layers, vocab 32000), %d threads, level %s\n",
                shape_1b ? "1B" : "110M", shape_1b ? 2048 : 768, shape_1b ? 5632 : 2048, shape_1b ? 22 : 12, n_threads,
                std::string(cpu::name(cpu::active_level())).c_str());

    // Hand-over cost of the pool (what a tiny model's decode step pays per op).
    {
        const int n = 20000;
        const auto t = clock_type::now();
        for (int i = 0; i < n; ++i) pool.parallel_for(n_threads, [](int64_t, int64_t) {});
        std::printf("thread pool: empty parallel_for round trip %.2f us\n", seconds_since(t) / n * 1e6);
    }
    // A tiny model's decode step (stories260K: dim 64, ffn 172, 5 layers, vocab 512; F32): per-call overhead.
    {
        const auto tiny = model_matmuls(64, 172, 512, 5);
        const model_weights m = make_weights(ggml_type::f32, tiny);
        std::vector<float> xs(172, 0.5f), ys(512);
        double best = 1e9;
        for (int i = 0; i < 200; ++i) {
            const auto t = clock_type::now();
            for (const matmul_weight& w : m.views) cpu::matmul(w, xs.data(), ys.data(), 1, pool);
            best = std::min(best, seconds_since(t));
        }
        std::printf("tiny model (stories260K shape, F32): the %zu matmuls of a decode step take %.1f us\n", tiny.size(),
                    best * 1e6);
    }
    const auto shapes = shape_1b ? model_matmuls(2048, 5632, 32000, 22) : model_matmuls();
    int64_t max_in = 0, max_out = 0, params = 0;
    for (const shape& s : shapes) {
        max_in = std::max(max_in, s.n_in);
        max_out = std::max(max_out, s.n_out);
        params += s.n_in * s.n_out;
    }
    const std::vector<int64_t> step_tokens = {1, 2, 4, 8, 16, 32};
    // Room for the prefill and for the largest step below (a prefill shorter than 32 tokens is allowed).
    const int64_t max_tokens = std::max(n_prefill, step_tokens.back());
    std::vector<float> x(max_tokens * max_in), y(max_tokens * max_out);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& v : x) v = normal(rng);

    std::vector<ggml_type> types = {ggml_type::f32,  ggml_type::q8_0, ggml_type::f16,  ggml_type::bf16,
                                    ggml_type::q4_0, ggml_type::q5_0, ggml_type::q4_k, ggml_type::q6_k};
    if (argc > 4) {  // only the named types (a comparison of two kernels in one quick run), the rarer ones too
        types.insert(types.end(), {ggml_type::q2_k, ggml_type::q3_k, ggml_type::q5_k});
        const std::string only = std::string(",") + argv[4] + ",";
        std::erase_if(types, [&](ggml_type t) {
            return only.find("," + std::string(traits(t).name) + ",") == std::string::npos;
        });
        if (types.empty()) {
            std::fprintf(stderr,
                         "troupe_kernels_bench: no type in '%s' (F32,Q8_0,F16,BF16,Q4_0,Q5_0,Q4_K,Q6_K; by name only: "
                         "Q2_K,Q3_K,Q5_K)\n",
                         argv[4]);
            return 2;
        }
    }
    std::vector<model_weights> weights;
    for (ggml_type type : types) weights.push_back(make_weights(type, shapes));
    std::vector<panel_weights> panels(types.size());  // Q8_0 / Q4_0 / Q4_K / Q6_K where the panel kernels run
    for (size_t i = 0; i < types.size(); ++i) {
        if (cpu::panels_supported(types[i], cpu::activation_recipe::quantized))
            panels[i] = make_panels(weights[i], pool);
    }

    // Every type in llama.cpp's recipe, the panel forms, then the types whose products the float-activation
    // recipe changes.
    struct bench_row {
        size_t type_index;
        cpu::activation_recipe recipe;
        bool panels;
    };
    std::vector<bench_row> rows;
    for (size_t i = 0; i < types.size(); ++i) rows.push_back({i, cpu::activation_recipe::quantized, false});
    for (size_t i = 0; i < types.size(); ++i) {
        if (!panels[i].views.empty()) rows.push_back({i, cpu::activation_recipe::quantized, true});
    }
    for (size_t i = 0; i < types.size(); ++i) {
        if (types[i] != ggml_type::f32) rows.push_back({i, cpu::activation_recipe::float32, false});
        if (!panels[i].views.empty() && cpu::q8_panels_supported(types[i], cpu::activation_recipe::float32))
            rows.push_back({i, cpu::activation_recipe::float32, true});
    }
    const auto views_of = [&](const bench_row& r) -> const std::vector<matmul_weight>& {
        return r.panels ? panels[r.type_index].views : weights[r.type_index].views;
    };
    const auto bytes_of = [&](const bench_row& r) {
        return r.panels ? panels[r.type_index].total_bytes : weights[r.type_index].total_bytes;
    };
    // Step times by token count: the rows of the types that have a panel form.
    std::vector<size_t> step_rows;
    for (size_t i = 0; i < rows.size(); ++i) {
        if (!panels[rows[i].type_index].views.empty()) step_rows.push_back(i);
    }
    std::vector<std::vector<double>> step_s(rows.size(), std::vector<double>(step_tokens.size(), 1e9));

    // Rounds of (limits, then every kernel): each figure is the best over the rounds, so a burst of other
    // work on a shared machine spoils a round's figure, not the result.
    double bandwidth = 0, peak = 0;
    std::vector<double> decode_s(rows.size(), 1e9), prefill_s(rows.size(), 1e9);
    for (int round = 0; round < n_rounds; ++round) {
        bandwidth = std::max(bandwidth, cpu::measure_read_bandwidth(pool));
        peak = std::max(peak, cpu::measure_fma_peak(pool));
        for (size_t i = 0; i < rows.size(); ++i) {
            const std::vector<matmul_weight>& views = views_of(rows[i]);
            const auto step = [&](int64_t n_tokens) {
                for (const matmul_weight& w : views) cpu::matmul(w, x.data(), y.data(), n_tokens, pool, rows[i].recipe);
            };
            const auto best_step = [&](int64_t n_tokens, int n_repeats, double& best) {
                step(n_tokens);  // warm up scratch buffers
                for (int k = 0; k < n_repeats; ++k) {
                    const auto t = clock_type::now();
                    step(n_tokens);
                    best = std::min(best, seconds_since(t));
                }
            };
            best_step(1, 10, decode_s[i]);
            if (std::find(step_rows.begin(), step_rows.end(), i) != step_rows.end()) {
                for (size_t j = 0; j < step_tokens.size(); ++j) best_step(step_tokens[j], 5, step_s[i][j]);
            }
            const auto t = clock_type::now();
            step(n_prefill);
            prefill_s[i] = std::min(prefill_s[i], seconds_since(t));
        }
    }
    std::printf(
        "limits: read bandwidth %.1f GB/s, FMA peak %.1f GFLOP/s (best of %d rounds, as every figure below)\n\n",
        bandwidth, peak, n_rounds);
    std::printf("%-5s %-5s %-6s %10s | %-38s | %-34s\n", "type", "act", "form", "weights",
                "decode (1 token, all matmuls)", "prefill");
    for (size_t i = 0; i < rows.size(); ++i) {
        const double total_bytes = static_cast<double>(bytes_of(rows[i]));
        const double gbs = total_bytes / decode_s[i] / 1e9;
        const double gflops = 2.0 * static_cast<double>(params) * static_cast<double>(n_prefill) / prefill_s[i] / 1e9;
        std::printf(
            "%-5s %-5s %-6s %7.1f MB | %6.2f ms/token %6.1f GB/s = %3.0f%% bw | %4lld tok %7.1f tok/s %6.1f GFLOP/s = "
            "%3.0f%% peak\n",
            std::string(traits(types[rows[i].type_index]).name).c_str(),
            rows[i].recipe == cpu::activation_recipe::float32 ? "float" : "quant", rows[i].panels ? "panels" : "rows",
            total_bytes / 1e6, decode_s[i] * 1e3, gbs, 100.0 * gbs / bandwidth, static_cast<long long>(n_prefill),
            n_prefill / prefill_s[i], gflops, 100.0 * gflops / peak);
    }
    if (!step_rows.empty()) {
        std::printf(
            "\nstep time (ms, all matmuls of the model) by tokens per step; 16/1: the 16-token step over the "
            "1-token step\n");
        std::printf("%-5s %-5s %-6s |", "type", "act", "form");
        for (int64_t n : step_tokens) std::printf(" %6lld tok", static_cast<long long>(n));
        std::printf(" | 16/1  | tok/s at 16\n");
        const size_t at16 = std::find(step_tokens.begin(), step_tokens.end(), 16) - step_tokens.begin();
        for (size_t i : step_rows) {
            std::printf("%-5s %-5s %-6s |", std::string(traits(types[rows[i].type_index]).name).c_str(),
                        rows[i].recipe == cpu::activation_recipe::float32 ? "float" : "quant",
                        rows[i].panels ? "panels" : "rows");
            for (double t : step_s[i]) std::printf(" %10.2f", t * 1e3);
            std::printf(" | %5.2f | %8.1f\n", step_s[i][at16] / step_s[i][0], 16.0 / step_s[i][at16]);
        }
    }
    return 0;
}
