// troupe bench --model M.gguf: prompt-processing and generation throughput.
//
// Structure like cmd_run.cpp: bench_spec() declares the flags, prepare_bench() validates them into
// bench_inputs, bench_command() runs the measurement. The measurement is not wired yet: the lead fills it.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/config/engine_config.h"

namespace troupe::cli {
namespace {

struct bench_inputs {
    engine_config config;
    int32_t n_prompt = 128;  // prompt tokens per sequence (prefill figure)
    int32_t n_gen = 128;     // generated tokens per sequence (decode figure)
    int32_t n_seqs = 1;      // sequences decoded together
    int32_t reps = 3;        // repetitions; the median is reported
};

result<int32_t> positive(const cli_args& args, std::string_view flag, int32_t fallback) {
    auto v = args.value(flag);
    if (!v) return fallback;
    auto n = parse_int_flag(flag, *v);
    if (!n) return n.err();
    if (*n < 1 || *n > 1000000) return make_error(std::string(flag) + ": must be between 1 and 1000000, got " + *v);
    return static_cast<int32_t>(*n);
}

result<bench_inputs> prepare_bench(const cli_args& args) {
    std::vector<std::string> problems;
    bench_inputs in;
    auto config = resolve_cli_config(args);
    if (!config) problems.push_back(config.message());
    struct count_flag {
        std::string_view flag;
        int32_t* field;
    };
    for (const auto& f : {count_flag{"--n-prompt", &in.n_prompt}, count_flag{"--n-gen", &in.n_gen},
                          count_flag{"--n-seqs", &in.n_seqs}, count_flag{"--reps", &in.reps}}) {
        auto v = positive(args, f.flag, *f.field);
        if (!v)
            problems.push_back(v.message());
        else
            *f.field = *v;
    }
    if (!problems.empty()) {
        return make_error(join_problems(problems));
    }
    in.config = std::move(*config);
    if (!args.has("--print-config") && in.config.model.empty()) {
        return make_error("no model: give --model M.gguf, set TROUPE_MODEL, or set model: in the config");
    }
    return in;
}

}  // namespace

const command_spec& bench_spec() {
    static const command_spec spec = [] {
        command_spec s{
            .name = "bench",
            .summary = "measure prompt processing and generation throughput",
            .usage = "troupe bench --model M.gguf [--n-prompt N] [--n-gen N] [--n-seqs N] [--reps N]",
        };
        s.flags.push_back({"--n-prompt", "", "N", "prompt tokens per sequence (default 128)"});
        s.flags.push_back({"--n-gen", "", "N", "generated tokens per sequence (default 128)"});
        s.flags.push_back({"--n-seqs", "", "N", "sequences decoded together (default 1)"});
        s.flags.push_back({"--reps", "", "N", "repetitions, the median is reported (default 3)"});
        s.flags.push_back({"--print-config", "", "", "print the effective config as YAML and exit"});
        for (auto& f : engine_flags()) s.flags.push_back(f);
        s.details = "No model at hand? 'troupe synth --shape 1B --vocab V.gguf --type q8_0 -o 1B.gguf' writes one.";
        return s;
    }();
    return spec;
}

int bench_command(const cli_args& args) {
    auto in = prepare_bench(args);
    if (!in) {
        std::fprintf(stderr, "troupe bench: %s\n", in.message().c_str());
        return exit_usage;
    }
    if (args.has("--print-config")) {
        std::fputs(to_yaml(in->config).c_str(), stdout);
        return exit_ok;
    }
    // TODO(lead): load the model, run reps x (prefill n_seqs x n_prompt tokens, then decode n_gen steps of
    // n_seqs tokens), print tokens/s for both phases (median of reps) and their ratio to the measured
    // memory-bandwidth and FLOP limits.
    std::fprintf(stderr, "troupe bench: not yet wired (model %s, %d prompt + %d generated tokens x %d sequences)\n",
                 in->config.model.c_str(), in->n_prompt, in->n_gen, in->n_seqs);
    return exit_failure;
}

}  // namespace troupe::cli
