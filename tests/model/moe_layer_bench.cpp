// moe_layer_bench (a measuring tool, not a test): decode (one token) through MoE FFN layers of the moe-1B shape
// (dim 1024, 8 experts of 2816 units, top 2, Q8_0) against dense SwiGLU FFN layers of the same active bytes (2 x 2816
// units), interleaved rep by rep so both see the same machine, with the read bandwidth measured in the same run.
// MoE costs its routing and twice the jobs of a dense FFN; this shows what that costs per byte streamed.
//
//   moe_layer_bench [N_THREADS (2)] [N_LAYERS (8)] [REPS (200)]
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/model/cpu_ops.h"
#include "core/model/moe_ffn.h"
#include "kernels/cpu/limits.h"
#include "kernels/ref/quants.h"

namespace troupe {
namespace {

constexpr int64_t k_dim = 1024, k_ffn = 2816, k_experts = 8;

struct stored {
    std::vector<uint8_t> bytes;
    weight_view view;
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
    m.view = weight_view{t, m.bytes.data(), n_in, n_out, rb};
    return m;
}

int run(int n_threads, int n_layers, int reps) {
    const ggml_type t = ggml_type::q8_0;
    std::mt19937 rng(1);
    cpu::thread_pool pool(n_threads);
    const compute_context ctx = compute_context::over(pool);
    moe_params p;
    p.n_experts = k_experts;
    p.n_used = 2;
    p.expert_ffn = k_ffn;
    p.norm_weights = true;
    auto make = [](const weight_view& w, const std::string& name, linear& out) -> status {
        auto l = linear::make(w, nullptr, name);
        if (!l.ok()) return l.err();
        out = std::move(*l);
        return {};
    };
    std::vector<stored> keep;
    keep.reserve(7 * n_layers);
    std::vector<moe_ffn> moes;
    std::vector<std::array<linear, 3>> dense(n_layers);
    std::vector<std::optional<linear>> dense_gate_up;
    auto ws = std::make_shared<moe_workspace>();
    for (int l = 0; l < n_layers; ++l) {
        moe_layer_weights w{};
        keep.push_back(random_matrix(ggml_type::f16, k_dim, k_experts, rng));
        w.router = keep.back().view;
        keep.push_back(random_matrix(t, k_dim, k_experts * k_ffn, rng));
        w.gate_exps = keep.back().view;
        keep.push_back(random_matrix(t, k_dim, k_experts * k_ffn, rng));
        w.up_exps = keep.back().view;
        keep.push_back(random_matrix(t, k_ffn, k_experts * k_dim, rng));
        w.down_exps = keep.back().view;
        auto m = moe_ffn::make(p, w, k_dim, "blk." + std::to_string(l) + ".", make, ws);
        if (!m.ok()) {
            std::fprintf(stderr, "moe_layer_bench: %s\n", m.message().c_str());
            return 1;
        }
        moes.push_back(std::move(*m));
        for (int i = 0; i < 3; ++i) {
            keep.push_back(i < 2 ? random_matrix(t, k_dim, 2 * k_ffn, rng) : random_matrix(t, 2 * k_ffn, k_dim, rng));
            if (status st = make(keep.back().view, "dense", dense[l][i]); !st.ok()) return 1;
        }
        const linear* parts[] = {&dense[l][0], &dense[l][1]};
        dense_gate_up.push_back(linear::concatenated(parts));
    }
    std::vector<float> x(k_dim), y(k_dim), gate_up(4 * k_ffn);
    double best_moe = 1e30, best_dense = 1e30, bandwidth = 0.0;
    for (int rep = 0; rep < reps; ++rep) {
        // The bandwidth as the best of probes spread over the run, as the timings are the best of reps.
        if (rep % std::max(1, reps / 8) == 0) bandwidth = std::max(bandwidth, cpu::measure_read_bandwidth(pool));
        for (int64_t i = 0; i < k_dim; ++i) x[i] = std::sin(0.37f * i + 0.1f * rep);  // routes vary by rep
        const auto t0 = std::chrono::steady_clock::now();
        for (int l = 0; l < n_layers; ++l) (void)moes[l].forward(x.data(), y.data(), 1, ctx);
        const auto t1 = std::chrono::steady_clock::now();
        for (int l = 0; l < n_layers; ++l) {
            (void)dense_gate_up[l]->forward(x.data(), gate_up.data(), 1, ctx);
            swiglu_rows(gate_up.data(), gate_up.data() + 2 * k_ffn, 2 * k_ffn);
            (void)dense[l][2].forward(gate_up.data(), y.data(), 1, ctx);
        }
        const auto t2 = std::chrono::steady_clock::now();
        best_moe = std::min(best_moe, std::chrono::duration<double>(t1 - t0).count());
        best_dense = std::min(best_dense, std::chrono::duration<double>(t2 - t1).count());
    }
    const double moe_bytes = static_cast<double>(n_layers) * static_cast<double>(moes[0].active_bytes_per_token());
    const double dense_bytes =
        static_cast<double>(n_layers) * static_cast<double>(2 * dense[0][0].n_bytes() + dense[0][2].n_bytes());
    std::printf("%d layers, %d threads, best of %d reps; read bandwidth %.1f GB/s (best of the probes)\n", n_layers,
                n_threads, reps, bandwidth);
    std::printf("MoE   (router + 2 of 8 experts): %7.3f ms, %6.1f MB, %5.1f GB/s = %5.1f%% of the bandwidth\n",
                best_moe * 1e3, moe_bytes / 1e6, moe_bytes / best_moe / 1e9,
                100.0 * moe_bytes / best_moe / 1e9 / bandwidth);
    std::printf("dense (same active bytes):       %7.3f ms, %6.1f MB, %5.1f GB/s = %5.1f%% of the bandwidth\n",
                best_dense * 1e3, dense_bytes / 1e6, dense_bytes / best_dense / 1e9,
                100.0 * dense_bytes / best_dense / 1e9 / bandwidth);
    return 0;
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
    const int n_threads = argc > 1 ? std::atoi(argv[1]) : 2;
    const int n_layers = argc > 2 ? std::atoi(argv[2]) : 8;
    const int reps = argc > 3 ? std::atoi(argv[3]) : 200;
    if (n_threads < 1 || n_layers < 1 || reps < 1) {
        std::fprintf(stderr, "usage: moe_layer_bench [N_THREADS] [N_LAYERS] [REPS]\n");
        return 2;
    }
    return troupe::run(n_threads, n_layers, reps);
}
