// Benchmark (not a test): multi-head latent attention's cache and decode speed.
//
// 1. KV bytes per token of DeepSeek-V2-Lite's and DeepSeek-V2's attention shapes: MLA's latent row (kv_lora_rank +
//    rope_dim) beside what the same model would keep as multi-head attention (keys of qk_nope + rope_dim and values of
//    v_head_dim per head) and as grouped-query attention with 8 key/value heads (mla_params.h).
// 2. attn_kv_b's bytes for both shapes per stored type: in the file, held by attention/mla now (mla_model.h's rule),
//    and the float32 copy it held before.
// 3. One layer's decode attention through attention/mla's ABI (a GGUF with one layer's attn_kv_b, F16 as files store
//    it, written here): one sequence decoding one token after `context` cached latent rows,
//    the naive path (expand every cached row into per-head keys and values) against the absorbed one (attend in the
//    latent space), F32 and F16 pools, on one thread. Prints the best of 7 batches (the thread's CPU time, so that a
//    shared machine's load does not count) per case, the cache bytes it reads and the multiply-adds it does per
//    token, and beside them one thread's read bandwidth measured in the same run (a plain sum over 512 MiB).
//
//   build/tests/plugins/bench_mla_attention [contexts...]     (default: 128 and 4096)
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/gguf/gguf_writer.h"
#include "core/model/mla_params.h"
#include "core/model/ops.h"
#include "core/plugin_host/plugin_host.h"
#include "core/plugin_host/plugin_model_services.h"
#include "kernels/fp16.h"

namespace troupe {
namespace {

namespace fs = std::filesystem;

// The calling thread's CPU time in ms: on a shared machine, time the thread spent descheduled does not count.
double now_ms() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

mla_params v2_lite() {  // DeepSeek-V2-Lite: 16 heads, 27 layers
    mla_params p;
    p.n_heads = 16;
    p.kv_lora_rank = 512;
    p.qk_nope = 128;
    p.rope_dim = 64;
    p.v_dim = 128;
    return p;
}

mla_params v2() {  // DeepSeek-V2: 128 heads, 60 layers, q LoRA 1536
    mla_params p = v2_lite();
    p.n_heads = 128;
    p.q_lora_rank = 1536;
    return p;
}

void print_kv_bytes() {
    std::printf("KV cache bytes per token (F16 elements; F32 doubles them)\n");
    std::printf("  %-22s %8s %12s %14s %14s %10s %10s\n", "model", "layers", "MLA latent", "MHA (K + V)",
                "GQA-8 (K + V)", "MHA / MLA", "GQA8 / MLA");
    for (const auto& [name, p, layers] : {std::tuple{"DeepSeek-V2-Lite", v2_lite(), 27}, {"DeepSeek-V2", v2(), 60}}) {
        const double mla = 2.0 * p.latent_elements_per_token() * layers;
        const double mha = 2.0 * p.mha_elements_per_token() * layers;
        const double gqa = 2.0 * p.gqa_elements_per_token(8) * layers;
        std::printf("  %-22s %8d %9.1f KiB %11.1f KiB %11.1f KiB %9.1fx %9.1fx\n", name, layers, mla / 1024, mha / 1024,
                    gqa / 1024, mha / mla, gqa / mla);
        std::printf(
            "  %-22s %8s %9lld el. %11lld el. %11lld el.   (per layer: latent %d + rope %d; heads %d x (%d + %d))\n",
            "", "", static_cast<long long>(p.latent_elements_per_token()),
            static_cast<long long>(p.mha_elements_per_token()), static_cast<long long>(p.gqa_elements_per_token(8)),
            p.kv_lora_rank, p.rope_dim, p.n_heads, p.head_dim(), p.v_dim);
    }
}

// attn_kv_b's bytes per model as files store it, and what attention/mla holds of them beside the model's own memory
// (mla_model.h): nothing for F32, F16 and BF16 (it reads the file's rows), an F16 copy for block formats; until
// this session it held a float32 copy of every type but F32.
void print_kv_b_bytes() {
    std::printf("\nattn_kv_b (W_UK, W_UV): bytes in the file, and bytes attention/mla holds beside it\n");
    std::printf("  %-18s %-6s %12s %14s %14s\n", "model", "stored", "file MiB", "held MiB now", "float copy MiB");
    struct stored {
        const char* name;
        double bytes_per_weight;
        bool block_format;
    };
    for (const auto& [name, p, layers] : {std::tuple{"DeepSeek-V2-Lite", v2_lite(), 27}, {"DeepSeek-V2", v2(), 60}}) {
        const double weights = static_cast<double>(layers) * p.n_heads * (p.qk_nope + p.v_dim) * p.kv_lora_rank;
        for (const stored& t : {stored{"F32", 4.0, false}, stored{"F16", 2.0, false}, stored{"BF16", 2.0, false},
                                stored{"Q8_0", 34.0 / 32, true}, stored{"Q4_K", 144.0 / 256, true}}) {
            const double held = t.block_format ? 2.0 * weights : 0.0;
            const double before = std::string(t.name) == "F32" ? 0.0 : 4.0 * weights;
            std::printf("  %-18s %-6s %12.1f %14.1f %14.1f\n", name, t.name, weights * t.bytes_per_weight / (1 << 20),
                        held / (1 << 20), before / (1 << 20));
        }
    }
}

// The read bandwidth of one thread: a sum over 512 MiB, best of 5.
double read_gbps() {
    std::vector<float> big((size_t{512} << 20) / sizeof(float), 1.0f);
    std::vector<double> sums(8, 0.0);
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
        const double t0 = now_ms();
        [&](int64_t b, int64_t e) {
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
            for (int64_t i = b * 4096; i < e * 4096; i += 8) {
                s0 += big[i], s1 += big[i + 1], s2 += big[i + 2], s3 += big[i + 3];
                s4 += big[i + 4], s5 += big[i + 5], s6 += big[i + 6], s7 += big[i + 7];
            }
            sums[static_cast<size_t>(b % 8)] += s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
        }(0, static_cast<int64_t>(big.size()) / 4096);
        best = std::min(best, now_ms() - t0);
    }
    return static_cast<double>(big.size() * sizeof(float)) / (best * 1e6);
}

int run(const std::vector<int32_t>& contexts) {
    print_kv_bytes();
    print_kv_b_bytes();
    const mla_params p = v2_lite();
    const int32_t lw = p.latent_width(), block_size = 16;
    const fs::path dir = fs::temp_directory_path() / ("troupe_bench_mla_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    gguf::gguf_writer w;
    w.set_string("general.architecture", "deepseek2");
    w.set_u32("deepseek2.block_count", 1);
    w.set_u32("deepseek2.attention.head_count", p.n_heads);
    w.set_u32("deepseek2.attention.kv_lora_rank", p.kv_lora_rank);
    w.set_u32("deepseek2.attention.key_length", p.head_dim());
    w.set_u32("deepseek2.attention.value_length", p.v_dim);
    w.set_u32("deepseek2.rope.dimension_count", p.rope_dim);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    const size_t kv_b_elements = static_cast<size_t>(p.n_heads) * (p.qk_nope + p.v_dim) * p.kv_lora_rank;
    std::vector<uint8_t> kv_b(kv_b_elements * 2);
    for (size_t i = 0; i < kv_b_elements; ++i) {
        const uint16_t h = fp32_to_fp16(normal(rng));
        std::memcpy(kv_b.data() + 2 * i, &h, 2);
    }
    w.add_tensor("blk.0.attn_kv_b.weight", ggml_type::f16, {p.kv_lora_rank, p.n_heads * (p.qk_nope + p.v_dim)},
                 std::span<const uint8_t>(kv_b));
    const std::string path = (dir / "mla.gguf").string();
    if (status st = w.write(path); !st.ok()) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        return 1;
    }
    auto file = gguf::gguf_file::open(path);
    if (!file.ok()) {
        std::fprintf(stderr, "%s\n", file.message().c_str());
        return 1;
    }
    plugin_host host(plugin_host_options{TROUPE_DEFAULT_PLUGIN_DIR}, make_model_services(*file));
    const parallel_for_fn inline_for = [](int64_t n, const std::function<void(int64_t, int64_t)>& fn) { fn(0, n); };
    const double gbps = read_gbps();
    std::printf(
        "\nDecode attention of one layer, DeepSeek-V2-Lite's shape (%d heads, latent %d + %d, q/k %d, v %d), "
        "batch 1, one thread (its CPU time: the machine may be shared); one thread's memory read bandwidth measured "
        "here: %.1f GB/s\n",
        p.n_heads, p.kv_lora_rank, p.rope_dim, p.head_dim(), p.v_dim, gbps);
    std::printf("  %-8s %-5s %-9s %10s %12s %10s %12s %10s\n", "context", "pool", "path", "ms/token", "cache MiB",
                "GB/s", "GMAC/token", "GMAC/s");
    for (const int32_t context : contexts) {
        const int32_t n_blocks = context / block_size + 1;
        std::vector<int32_t> table(n_blocks);
        for (int32_t b = 0; b < n_blocks; ++b) table[b] = b;
        const int32_t* tables[1] = {table.data()};
        std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
        std::vector<float> q(static_cast<size_t>(p.q_width())), k(lw), out(static_cast<size_t>(p.out_width()));
        for (float& x : q) x = uni(rng);
        for (float& x : k) x = uni(rng);
        const int32_t position = context;  // after `context` cached rows
        const int32_t seq = 0;
        for (const bool f16 : {false, true}) {
            std::vector<uint8_t> pool_bytes(static_cast<size_t>(n_blocks) * block_size * lw * (f16 ? 2 : 4));
            for (size_t i = 0; i < pool_bytes.size() / (f16 ? 2 : 4); ++i) {
                const float x = uni(rng);
                if (f16) {
                    const uint16_t h = fp32_to_fp16(x);
                    std::memcpy(pool_bytes.data() + 2 * i, &h, 2);
                } else {
                    std::memcpy(pool_bytes.data() + 4 * i, &x, 4);
                }
            }
            for (const char* path_name : {"naive", "absorbed"}) {
                auto op = host.load_attention("mla", YAML::Load(std::string("{path: ") + path_name + "}"));
                if (!op.ok()) {
                    std::fprintf(stderr, "%s\n", op.message().c_str());
                    return 1;
                }
                attention_call c{
                    1,        p.n_heads, 1,       p.head_dim(), p.attention_scale(),
                    q.data(), k.data(),  nullptr, out.data(),   &position,
                    &seq,     1,         tables,  block_size,   reinterpret_cast<float*>(pool_bytes.data()),
                    nullptr};
                c.kv_type = f16 ? kv_dtype::f16 : kv_dtype::f32;
                c.kv_lora_rank = p.kv_lora_rank;
                c.rope_dim = p.rope_dim;
                c.v_head_dim = p.v_dim;
                const int reps = std::string(path_name) == "naive" && context > 1024 ? 2 : 20;
                double best = 1e30;
                for (int batch = 0; batch < 7; ++batch) {
                    const double t0 = now_ms();
                    for (int r = 0; r < reps; ++r) {
                        if (status st = (*op)->forward(c, inline_for); !st.ok()) {
                            std::fprintf(stderr, "%s\n", st.message().c_str());
                            return 1;
                        }
                    }
                    best = std::min(best, (now_ms() - t0) / reps);
                }
                const double rows = context + 1;
                const double cache_bytes = rows * lw * (f16 ? 2 : 4);
                const double per_head_kv_b = static_cast<double>(p.qk_nope + p.v_dim) * p.kv_lora_rank;
                const double macs =
                    std::string(path_name) == "naive"
                        ? rows * p.n_heads * per_head_kv_b + rows * p.n_heads * (p.head_dim() + p.v_dim)
                        : p.n_heads * per_head_kv_b + rows * p.n_heads * (2.0 * p.kv_lora_rank + p.rope_dim);
                std::printf("  %-8d %-5s %-9s %10.3f %12.2f %10.1f %12.3f %10.1f\n", context, f16 ? "f16" : "f32",
                            path_name, best, cache_bytes / (1 << 20), cache_bytes / (best * 1e6), macs / 1e9,
                            macs / (best * 1e6));
            }
        }
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
    return 0;
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
    std::vector<int32_t> contexts;
    for (int i = 1; i < argc; ++i) contexts.push_back(std::atoi(argv[i]));
    if (contexts.empty()) contexts = {128, 4096};
    return troupe::run(contexts);
}
