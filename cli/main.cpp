// troupe: the command-line entry point. Dispatches `troupe <command> ...` to cmd_<command>.cpp.
//
// Exit codes: 0 success, 1 the command failed (message on stderr), 2 the command line was wrong
// (the message names the flag or argument and lists what is valid).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/cli_args.h"
#include "cli/commands.h"

namespace troupe::cli {
namespace {

struct command_entry {
    const command_spec& (*spec)();
    int (*handler)(const cli_args&);
};

const command_entry commands[] = {
    {run_spec, run_command},
    {serve_spec, serve_command},
    {bench_spec, bench_command},
    {info_spec, info_command},
    {tokenize_spec, tokenize_command},
    {synth_spec, synth_command},
    {perplexity_spec, perplexity_command},
    {quantize_spec, quantize_command},
    {distill_spec, distill_command},
    {template_spec, template_command},
};

std::string command_names() {
    std::string s;
    for (const auto& c : commands) s += std::string(s.empty() ? "" : ", ") + std::string(c.spec().name);
    return s;
}

void print_overview(std::FILE* out) {
    std::fprintf(out,
                 "troupe: an LLM inference engine for Llama-family GGUF models\n\nusage: troupe <command> "
                 "[flags]\n\ncommands:\n");
    for (const auto& c : commands) {
        std::fprintf(out, "  %-10.*s %.*s\n", static_cast<int>(c.spec().name.size()), c.spec().name.data(),
                     static_cast<int>(c.spec().summary.size()), c.spec().summary.data());
    }
    std::fprintf(out, "\n'troupe <command> --help' lists a command's flags.\n");
}

const command_entry* find_command(const std::string& name) {
    for (const auto& c : commands) {
        if (c.spec().name == name) return &c;
    }
    return nullptr;
}

int dispatch(const std::vector<std::string>& argv) {
    if (argv.empty()) {
        print_overview(stderr);
        return exit_usage;
    }
    const std::string& name = argv[0];
    if (name == "--help" || name == "-h") {
        print_overview(stdout);
        return exit_ok;
    }
    if (name == "help") {
        if (argv.size() < 2) {
            print_overview(stdout);
            return exit_ok;
        }
        const command_entry* c = find_command(argv[1]);
        if (!c) {
            std::fprintf(stderr, "troupe: unknown command '%s' (valid: %s)\n", argv[1].c_str(),
                         command_names().c_str());
            return exit_usage;
        }
        std::fputs(help_text(c->spec()).c_str(), stdout);
        return exit_ok;
    }
    const command_entry* c = find_command(name);
    if (!c) {
        std::fprintf(stderr, "troupe: unknown command '%s' (valid: %s)\n", name.c_str(), command_names().c_str());
        return exit_usage;
    }
    // `troupe bench serve ...` is a sub-mode of bench with flags of its own.
    static const command_entry bench_serve{bench_serve_spec, bench_serve_command};
    const bool sub = name == "bench" && argv.size() > 1 && argv[1] == "serve";
    if (sub) c = &bench_serve;
    const command_spec& spec = c->spec();
    const std::vector<std::string> rest(argv.begin() + (sub ? 2 : 1), argv.end());
    auto args = parse_args(spec, rest);
    if (!args) {
        const std::string spec_name(spec.name);
        std::fprintf(stderr, "troupe %s: %s\nusage: %s\n'troupe %s --help' lists the flags.\n", spec_name.c_str(),
                     args.message().c_str(), std::string(spec.usage).c_str(), spec_name.c_str());
        return exit_usage;
    }
    if (args->help) {
        std::fputs(help_text(spec).c_str(), stdout);
        return exit_ok;
    }
    return c->handler(*args);
}

}  // namespace
}  // namespace troupe::cli

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    try {
        return troupe::cli::dispatch(args);
    } catch (const std::exception& e) {  // the edge: nothing below is expected to throw
        std::fprintf(stderr, "troupe: internal error: %s\n", e.what());
        return troupe::cli::exit_failure;
    }
}
