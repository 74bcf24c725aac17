// troupe tokenize --model M.gguf "text": the token ids, space-separated on one line (BOS first unless
// --no-bos). With --detokenize the arguments are ids and the decoded text is printed.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/gguf/gguf_file.h"
#include "core/tokenizer/tokenizer.h"

namespace troupe::cli {

const command_spec& tokenize_spec() {
    static const command_spec spec{
        .name = "tokenize",
        .summary = "print the token ids of a text, or the text of token ids",
        .usage = "troupe tokenize --model M.gguf [--no-bos] TEXT | --detokenize ID...",
        .flags =
            {
                {"--model", "-m", "FILE",
                 "GGUF file with a vocabulary (a model or a vocab-only file; also $TROUPE_MODEL)"},
                {"--no-bos", "", "", "leave the BOS token out"},
                {"--detokenize", "-d", "", "the arguments are token ids: print their text"},
            },
        .min_args = 1,
        .max_args = -1,
    };
    return spec;
}

int tokenize_command(const cli_args& args) {
    std::string model = args.value_or("--model", "");
    if (model.empty()) {
        if (const char* env = std::getenv("TROUPE_MODEL"); env && *env) model = env;
    }
    if (model.empty()) {
        std::fprintf(stderr, "troupe tokenize: --model is required (or set TROUPE_MODEL)\nusage: %s\n",
                     std::string(tokenize_spec().usage).c_str());
        return exit_usage;
    }
    const bool detokenize = args.has("--detokenize");
    if (!detokenize && args.args.size() != 1) {
        std::fprintf(stderr, "troupe tokenize: expected one TEXT argument, got %zu (quote the text)\n",
                     args.args.size());
        return exit_usage;
    }
    std::vector<int32_t> ids;
    if (detokenize) {
        for (const auto& a : args.args) {
            auto id = parse_int_flag("--detokenize", a);
            if (!id || *id < 0 || *id > INT32_MAX) {
                std::fprintf(stderr, "troupe tokenize: --detokenize: expected token ids, got '%s'\n", a.c_str());
                return exit_usage;
            }
            ids.push_back(static_cast<int32_t>(*id));
        }
    }

    auto file = gguf::gguf_file::open(model);
    if (!file) {
        std::fprintf(stderr, "troupe tokenize: %s\n", file.message().c_str());
        return exit_failure;
    }
    auto tok = tokenizer::from_gguf(**file);
    if (!tok) {
        std::fprintf(stderr, "troupe tokenize: %s\n", tok.message().c_str());
        return exit_failure;
    }
    const tokenizer& t = **tok;

    if (detokenize) {
        for (int32_t id : ids) {
            if (id >= t.n_vocab()) {
                std::fprintf(stderr, "troupe tokenize: token id %d is outside the vocabulary of %s (0..%d)\n", id,
                             model.c_str(), t.n_vocab() - 1);
                return exit_failure;
            }
        }
        std::string text = t.decode(ids);
        text += '\n';
        std::fwrite(text.data(), 1, text.size(), stdout);
        return exit_ok;
    }
    const std::vector<int32_t> out = t.encode(args.args[0], !args.has("--no-bos"));
    std::string line;
    for (size_t i = 0; i < out.size(); ++i) {
        if (i > 0) line += ' ';
        line += std::to_string(out[i]);
    }
    line += '\n';
    std::fputs(line.c_str(), stdout);
    return exit_ok;
}

}  // namespace troupe::cli
