// troupe synth --shape NAME --vocab V.gguf --type TYPE -o OUT.gguf: a Llama-shaped GGUF with seeded
// random weights (synth_model.h), for benchmarks without downloading a model.
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/commands.h"
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

}  // namespace

const command_spec& synth_spec() {
    static const command_spec spec{
        .name = "synth",
        .summary = "write a GGUF model with seeded random weights in a named Llama shape",
        .usage =
            "troupe synth --shape NAME --vocab V.gguf --type f32|f16|q8_0|q4_0|q4_k|q4_1|w4_g64|w4_g128 -o OUT.gguf "
            "[--seed N]",
        .flags =
            {
                {"--shape", "", "NAME",
                 "tiny (dim 256, 2 layers, GQA 8/4), 110M (dim 768, 12 layers), "
                 "1B (dim 2048, 22 layers, GQA 32/4)"},
                {"--vocab", "", "FILE", "GGUF file whose tokenizer (and vocabulary size) the model gets"},
                {"--type", "", "TYPE",
                 "weight type of the matrices: f32, f16, q8_0, q4_0, q4_k, q4_1, w4_g64 or w4_g128 (default f16)"},
                {"--output", "-o", "FILE", "the GGUF file to write"},
                {"--seed", "", "N", "random seed (default 1); the same seed writes the same file"},
                {"--threads", "-t", "N", "threads for generating and quantizing, 0 = all cores (default)"},
            },
        .min_args = 0,
        .max_args = 0,
        .details = "Norm weights are 1 and stay F32; matrices are 0.02 x (approximately normal) values.",
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
    const std::string type_name = args.value_or("--type", "f16");
    const auto type = parse_synth_type(type_name);
    if (!type)
        problems.push_back("--type: unknown type '" + type_name +
                           "' (valid: f32, f16, q8_0, q4_0, q4_k, q4_1, w4_g64, w4_g128)");
    const auto vocab_path = args.value("--vocab");
    if (!vocab_path) problems.push_back("--vocab is required (a GGUF file with tokenizer metadata)");
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
    if (!problems.empty()) {
        return usage_error(join_problems(problems));
    }
    p.shape = *shape;
    p.type = *type;

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
    std::fprintf(stderr,
                 "troupe synth: wrote %s: shape %s, %s, %.1fM parameters, vocabulary %lld, %.1f MiB in %.1f s\n",
                 out_path->c_str(), std::string(shape->name).c_str(), type_name.c_str(),
                 static_cast<double>(summary->n_params) / 1e6, static_cast<long long>(summary->n_vocab),
                 static_cast<double>(summary->n_bytes) / (1024.0 * 1024.0), seconds);
    return exit_ok;
}

}  // namespace troupe::cli
