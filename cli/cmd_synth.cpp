// troupe synth --shape NAME [--arch ARCH] --vocab V.gguf --type TYPE -o OUT.gguf: a GGUF of that shape and architecture
// with seeded random weights (synth_model.h, synth_arch.h), for tests and benchmarks without downloading a model.
// troupe synth --grow-from M.gguf --shape NAME [--noise X] -o OUT.gguf: M grown into the shape, computing M's function
// plus seeded noise on the new weights (grow_model.h): a target that M drafts for.
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/grow_model.h"
#include "cli/synth_model.h"
#include "core/gguf/gguf_file.h"

namespace troupe::cli {
namespace {

std::string shape_list() {
    std::string s;
    for (const auto& sh : synth_shapes()) s += std::string(s.empty() ? "" : ", ") + std::string(sh.name);
    return s;
}

int usage_error(const std::string& message) {
    std::fprintf(stderr, "troupe synth: %s\nusage: %s\n", message.c_str(), std::string(synth_spec().usage).c_str());
    return exit_usage;
}

int grow_command(const synth_params& sp, const std::string& source, float noise, const std::string& type_name,
                 const std::string& out_path) {
    const grow_params p{.shape = sp.shape, .type = sp.type, .noise = noise, .seed = sp.seed, .n_threads = sp.n_threads};
    const auto start = std::chrono::steady_clock::now();
    auto summary = write_grown_model(p, source, out_path);
    if (!summary) {
        std::fprintf(stderr, "troupe synth: %s\n", summary.message().c_str());
        return exit_failure;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const grow_layout& g = summary->layout;
    std::fprintf(stderr,
                 "troupe synth: wrote %s: %s grown into shape %s (dim %d -> %d, layers %d -> %d of which %d identity, "
                 "heads %d/%d -> %d/%d, head size %d -> %d, FFN %d -> %d), noise %g, %s, %.1fM parameters, "
                 "%.1f MiB in %.1f s\n",
                 out_path.c_str(), source.c_str(), std::string(p.shape.name).c_str(), g.source.dim, g.target.dim,
                 g.source.n_layers, g.target.n_layers, g.n_identity_layers(), g.source.n_heads, g.source.n_kv_heads,
                 g.target.n_heads, g.target.n_kv_heads, g.source.head_dim, g.target.head_dim, g.source.ffn_dim,
                 g.target.ffn_dim, static_cast<double>(p.noise), type_name.c_str(),
                 static_cast<double>(summary->n_params) / 1e6,
                 static_cast<double>(summary->n_bytes) / (1024.0 * 1024.0), seconds);
    return exit_ok;
}

}  // namespace

const command_spec& synth_spec() {
    static const command_spec spec{
        .name = "synth",
        .summary = "write a GGUF model in a named shape and architecture: seeded random weights, or a real model grown",
        .usage =
            "troupe synth --shape NAME [--arch ARCH] (--vocab V.gguf | --grow-from M.gguf [--noise X]) "
            "[--type f32|f16|q8_0|q4_0|q5_0|q2_k|q3_k|q4_k|q5_k|q6_k|q4_1|w4_g64|w4_g128] [--ctx N] -o OUT.gguf "
            "[--seed N]",
        .flags =
            {
                {"--shape", "", "NAME",
                 "tiny (dim 256, 2 layers, GQA 8/4), 110M (dim 768, 12 layers), "
                 "1B (dim 2048, 22 layers, GQA 32/4), moe-1B (dim 1024, 16 layers, GQA 16/4, 8 experts of 2816 "
                 "units, top 2: 1.2B parameters, 0.38B active; mixtral or deepseek2 only)"},
                {"--arch", "", "ARCH",
                 "llama (default; mixtral for moe-1B), qwen2, phi3, gemma2, mixtral (llama with 8 experts, top 2) "
                 "or deepseek2 (MLA with q LoRA, a leading dense layer, then 8 experts top 2 and 1 shared)"},
                {"--vocab", "", "FILE", "GGUF file whose tokenizer (and vocabulary size) the model gets"},
                {"--grow-from", "", "FILE",
                 "a dense Llama GGUF to grow into the shape: the model computes its function (new heads, channels, "
                 "FFN units and layers start at zero) plus the noise; its tokenizer is copied"},
                {"--noise", "", "X",
                 "with --grow-from: seeded noise on the new weights, X / sqrt(row length) times a normal value "
                 "(default 0.35: stories260K predicts ~80% of its 110M or 1B growth's greedy tokens; 0: the grown "
                 "model's logits are the source's)"},
                {"--type", "", "TYPE",
                 "weight type of the matrices: f32, f16, q8_0, q4_0, q5_0, q2_k, q3_k, q4_k, q5_k, q6_k, q4_1, w4_g64 "
                 "or "
                 "w4_g128 "
                 "(default "
                 "f16)"},
                {"--ctx", "", "N",
                 "context length the file declares (default the shape's: 2048 for 1B, 1024 for 110M, 512 for tiny; "
                 "a grown model keeps its source's when longer)"},
                {"--output", "-o", "FILE", "the GGUF file to write"},
                {"--seed", "", "N", "random seed (default 1); the same seed writes the same file"},
                {"--threads", "-t", "N", "threads for generating and quantizing, 0 = all cores (default)"},
            },
        .min_args = 0,
        .max_args = 0,
        .details =
            "Random weights: norm weights are 1 and stay F32; matrices are 0.02 x (approximately normal) "
            "values. Grown weights: the source's where it has them (norms rescaled for the wider residual), "
            "noise elsewhere; with --noise 0 and --type f32 greedy output equals the source's.",
    };
    return spec;
}

int synth_command(const cli_args& args) {
    std::vector<std::string> problems;
    synth_params p;
    const auto shape_name = args.value("--shape");
    const synth_shape* shape = shape_name ? find_synth_shape(*shape_name) : nullptr;
    if (!shape_name)
        problems.push_back("--shape is required (valid: " + shape_list() + ")");
    else if (!shape)
        problems.push_back("--shape: unknown shape '" + *shape_name + "' (valid: " + shape_list() + ")");
    const std::optional<std::string> arch_name = args.value("--arch");
    std::optional<synth_arch> arch = shape && shape->experts_only ? synth_arch::mixtral : synth_arch::llama;
    if (arch_name) {
        arch = parse_synth_arch(*arch_name);
        if (!arch) {
            problems.push_back("--arch: unknown architecture '" + *arch_name + "' (valid: " + synth_arch_list() + ")");
        } else if (shape && shape->experts_only && !synth_arch_has_experts(*arch)) {
            problems.push_back("--arch: shape " + std::string(shape->name) +
                               " is a mixture of experts; it takes --arch mixtral or deepseek2, not " + *arch_name);
        }
    }
    const std::string type_name = args.value_or("--type", "f16");
    const auto type = parse_synth_type(type_name);
    if (!type)
        problems.push_back(
            "--type: unknown type '" + type_name +
            "' (valid: f32, f16, q8_0, q4_0, q5_0, q2_k, q3_k, q4_k, q5_k, q6_k, q4_1, w4_g64, w4_g128)");
    const auto vocab_path = args.value("--vocab");
    const auto grow_path = args.value("--grow-from");
    if (!vocab_path && !grow_path) {
        problems.push_back(
            "--vocab (a GGUF file with tokenizer metadata) or --grow-from (a model to grow) is required");
    }
    if (grow_path && shape && shape->experts_only) {
        problems.push_back("--grow-from grows into a dense shape, not the mixture-of-experts " +
                           std::string(shape->name));
    }
    if (grow_path && arch_name && arch != synth_arch::llama) {
        problems.push_back("--grow-from grows a dense llama model; --arch " + *arch_name +
                           " applies to random weights");
    }
    if (vocab_path && grow_path) {
        problems.push_back("--vocab and --grow-from exclude each other (a grown model keeps its source's tokenizer)");
    }
    float noise = k_default_grow_noise;
    if (auto v = args.value("--noise")) {
        auto x = parse_float_flag("--noise", *v);
        if (!grow_path)
            problems.push_back("--noise applies only with --grow-from");
        else if (!x || !(*x >= 0.0 && *x <= 1.0))
            problems.push_back("--noise: expected a number from 0 to 1, got '" + *v + "'");
        else
            noise = static_cast<float>(*x);
    }
    const auto out_path = args.value("--output");
    if (!out_path) problems.push_back("-o/--output is required");
    if (auto v = args.value("--seed")) {
        auto seed = parse_int_flag("--seed", *v);
        if (!seed || *seed < 0)
            problems.push_back("--seed: expected a non-negative integer, got '" + *v + "'");
        else
            p.seed = static_cast<uint64_t>(*seed);
    }
    if (auto v = args.value("--threads")) {
        auto n = parse_int_flag("--threads", *v);
        if (!n || *n < 0 || *n > 1024)
            problems.push_back("--threads: expected 0 to 1024, got '" + *v + "'");
        else
            p.n_threads = static_cast<int>(*n);
    }
    std::optional<int32_t> n_ctx;
    if (auto v = args.value("--ctx")) {
        auto n = parse_int_flag("--ctx", *v);
        if (!n || *n < 16 || *n > (1 << 20))
            problems.push_back("--ctx: expected 16 to 1048576, got '" + *v + "'");
        else
            n_ctx = static_cast<int32_t>(*n);
    }
    if (!problems.empty()) {
        return usage_error(join_problems(problems));
    }
    p.shape = *shape;
    if (n_ctx) p.shape.n_ctx = *n_ctx;
    p.type = *type;
    p.arch = *arch;
    if (grow_path) return grow_command(p, *grow_path, noise, type_name, *out_path);

    auto vocab = gguf::gguf_file::open(*vocab_path);
    if (!vocab) {
        std::fprintf(stderr, "troupe synth: %s\n", vocab.message().c_str());
        return exit_failure;
    }
    const auto start = std::chrono::steady_clock::now();
    auto summary = write_synth_model(p, **vocab, *out_path);
    if (!summary) {
        std::fprintf(stderr, "troupe synth: %s\n", summary.message().c_str());
        return exit_failure;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char active_buf[64] = "";
    if (summary->n_active_params != summary->n_params) {
        std::snprintf(active_buf, sizeof active_buf, " (%.1fM active per token)",
                      static_cast<double>(summary->n_active_params) / 1e6);
    }
    std::fprintf(
        stderr, "troupe synth: wrote %s: %s, shape %s, %s, %.1fM parameters%s, vocabulary %lld, %.1f MiB in %.1f s\n",
        out_path->c_str(), std::string(synth_arch_name(p.arch)).c_str(), std::string(shape->name).c_str(),
        type_name.c_str(), static_cast<double>(summary->n_params) / 1e6, active_buf,
        static_cast<long long>(summary->n_vocab), static_cast<double>(summary->n_bytes) / (1024.0 * 1024.0), seconds);
    return exit_ok;
}

}  // namespace troupe::cli
