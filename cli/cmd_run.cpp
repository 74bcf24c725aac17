// troupe run --model M.gguf --prompt "..." [sampling flags] [--config C.yaml]: generate and stream the text
// to stdout.
//
// Structure: run_spec() declares the flags; prepare_run() turns them into a validated run_inputs (the
// effective config and the prompt), with every problem reported at once; run_command() then drives the
// engine. The engine part is not wired yet: it is the lead's to fill in at the marked place.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/config/engine_config.h"

namespace troupe::cli {
namespace {

struct run_inputs {
    engine_config config;  // defaults < --config < $TROUPE_MODEL < flags; config.sampling is the request's
    std::string prompt;    // backslash escapes already applied
};

// Exit code on failure; the message is printed here.
result<run_inputs> prepare_run(const cli_args& args) {
    auto config = resolve_cli_config(args);
    if (!config) return config.err();
    run_inputs in{std::move(*config), unescape(args.value_or("--prompt", ""))};
    if (args.has("--print-config")) return in;
    if (in.config.model.empty())
        return make_error("no model: give --model M.gguf, set TROUPE_MODEL, or set model: in the config");
    if (!args.has("--prompt")) return make_error("--prompt is required");
    return in;
}

}  // namespace

const command_spec& run_spec() {
    static const command_spec spec = [] {
        command_spec s{
            .name = "run",
            .summary = "generate text from a prompt, streamed to stdout",
            .usage = "troupe run --model M.gguf --prompt TEXT [sampling flags] [--config C.yaml] [--set KEY=VALUE]",
        };
        s.flags.push_back({"--prompt", "-p", "TEXT", "the prompt (backslash escapes like \\n work)"});
        s.flags.push_back({"--print-config", "", "", "print the effective config as YAML and exit"});
        for (auto& f : engine_flags()) s.flags.push_back(f);
        for (auto& f : sampling_flags()) s.flags.push_back(f);
        s.details = "Precedence: config/default.yaml values < --config file < $TROUPE_MODEL < flags < --set.";
        return s;
    }();
    return spec;
}

int run_command(const cli_args& args) {
    auto in = prepare_run(args);
    if (!in) {
        std::fprintf(stderr, "troupe run: %s\n", in.message().c_str());
        return exit_usage;
    }
    if (args.has("--print-config")) {
        std::fputs(to_yaml(in->config).c_str(), stdout);
        return exit_ok;
    }
    // TODO(lead): load the model (in->config.model, device, threads, plugins), tokenize in->prompt with BOS,
    // submit one request with in->config.sampling, and write each text delta to stdout as it arrives
    // (fflush per delta); the tokens/s summary goes to stderr. Exit 1 with the error's message on failure.
    std::fprintf(stderr, "troupe run: not yet wired (model %s, %zu-byte prompt)\n", in->config.model.c_str(),
                 in->prompt.size());
    return exit_failure;
}

}  // namespace troupe::cli
