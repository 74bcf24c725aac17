// troupe info M.gguf: the GGUF header, metadata (long arrays abbreviated) and tensor table.
#include <cstdio>

#include "cli/commands.h"
#include "core/gguf/gguf_file.h"

namespace troupe::cli {

const command_spec& info_spec() {
    static const command_spec spec{
        .name = "info",
        .summary = "print a GGUF file's header, metadata and tensors",
        .usage = "troupe info M.gguf",
        .flags = {},
        .min_args = 1,
        .max_args = 1,
    };
    return spec;
}

int info_command(const cli_args& args) {
    auto file = gguf::gguf_file::open(args.args[0]);
    if (!file) {
        std::fprintf(stderr, "troupe info: %s\n", file.message().c_str());
        return exit_failure;
    }
    std::fputs(gguf::describe(**file).c_str(), stdout);
    return exit_ok;
}

}  // namespace troupe::cli
