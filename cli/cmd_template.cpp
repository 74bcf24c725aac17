// troupe template (--model M.gguf | --template FILE.jinja [--bos-token T] [--eos-token T])
//   --messages FILE.json [--tools FILE.json] [--no-generation-prompt]
// prints the prompt a chat template renders for the messages, byte for byte as transformers'
// apply_chat_template would (nothing added: no newline at the end). A template that raises
// (raise_exception) exits 1 with its own message; a syntax error exits 1 naming the line and column.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <boost/json.hpp>

#include "cli/commands.h"
#include "core/chat/chat_formatter.h"
#include "core/gguf/gguf_file.h"
#include "core/json/precise_parse.h"
#include "core/tokenizer/tokenizer.h"

namespace troupe::cli {
namespace {

result<std::string> read_file(const std::string& path, const char* flag) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(std::string(flag) + ": cannot open '" + path + "'");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

result<boost::json::value> read_json(const std::string& path, const char* flag) {
    auto text = read_file(path, flag);
    if (!text) return text.err();
    boost::system::error_code ec;
    boost::json::value v = json_text::parse_precise(*text, ec);
    if (ec) return make_error(std::string(flag) + ": " + path + " is not valid JSON: " + ec.message());
    return v;
}

// The formatter of --model (the GGUF's template, or the built-in fallback) or of --template.
result<chat_formatter> formatter_of(const cli_args& args) {
    chat_template_tokens tokens;
    if (auto model = args.value("--model")) {
        auto file = gguf::gguf_file::open(*model);
        if (!file) return file.err();
        auto tok = tokenizer::from_gguf(**file);
        if (!tok) return tok.err();
        tokens = chat_tokens_from(**tok);
    }
    auto set_token = [&](const char* flag, const char* name) {
        if (auto t = args.value(flag)) {
            std::erase_if(tokens.named, [&](const auto& kv) { return kv.first == name; });
            tokens.named.emplace_back(name, *t);
        }
    };
    set_token("--bos-token", "bos_token");
    set_token("--eos-token", "eos_token");
    tokens.bos = std::string(tokens.find("bos_token"));
    if (auto path = args.value("--template")) {
        auto text = read_file(*path, "--template");
        if (!text) return text.err();
        auto f = chat_formatter::from_jinja(*text, tokens);
        if (!f) return make_error(*path + ": " + f.message());
        return f;
    }
    auto file = gguf::gguf_file::open(*args.value("--model"));
    if (!file) return file.err();
    auto f = chat_formatter::from_model((*file)->string_or("tokenizer.chat_template", ""), tokens);
    std::fprintf(stderr, "troupe template: %s\n", f.why().c_str());
    return f;
}

}  // namespace

const command_spec& template_spec() {
    static const command_spec spec{
        .name = "template",
        .summary = "print the prompt a chat template renders for a conversation",
        .usage =
            "troupe template (--model M.gguf | --template FILE.jinja [--bos-token T] [--eos-token T]) "
            "--messages FILE.json [--tools FILE.json] [--no-generation-prompt]",
        .flags =
            {
                {"--model", "-m", "FILE", "GGUF file whose tokenizer.chat_template and special tokens to use"},
                {"--template", "-t", "FILE", "a Jinja chat template file instead of a model's"},
                {"--bos-token", "", "TEXT", "bos_token's text (default: the model's, or undefined)"},
                {"--eos-token", "", "TEXT", "eos_token's text (default: the model's, or undefined)"},
                {"--messages", "", "FILE",
                 "JSON: an array of messages, or an object with \"messages\" (and \"tools\") as in a request"},
                {"--tools", "", "FILE",
                 "JSON array of tool schemas (default: the messages file's \"tools\", else None)"},
                {"--no-generation-prompt", "", "", "add_generation_prompt false (default true)"},
            },
        .details =
            "The template runs as transformers' apply_chat_template runs it (trim_blocks, lstrip_blocks, "
            "messages, tools, add_generation_prompt, bos_token, eos_token). Exit 1 with the template's "
            "message when it raises, or with the line and column of a syntax error.",
    };
    return spec;
}

int template_command(const cli_args& args) {
    if (args.has("--model") == args.has("--template")) {
        std::fprintf(stderr, "troupe template: give exactly one of --model and --template\nusage: %s\n",
                     std::string(template_spec().usage).c_str());
        return exit_usage;
    }
    if (!args.has("--messages")) {
        std::fprintf(stderr, "troupe template: --messages FILE.json is required\nusage: %s\n",
                     std::string(template_spec().usage).c_str());
        return exit_usage;
    }
    auto messages_doc = read_json(*args.value("--messages"), "--messages");
    if (!messages_doc) {
        std::fprintf(stderr, "troupe template: %s\n", messages_doc.message().c_str());
        return exit_failure;
    }
    const boost::json::array* messages = messages_doc->if_array();
    const boost::json::array* tools = nullptr;
    if (const auto* o = messages_doc->if_object()) {
        if (const auto* m = o->if_contains("messages")) messages = m->if_array();
        if (const auto* t = o->if_contains("tools")) tools = t->if_array();
    }
    if (!messages) {
        std::fprintf(stderr,
                     "troupe template: --messages: %s holds neither an array of messages nor an object "
                     "with a \"messages\" array\n",
                     args.value("--messages")->c_str());
        return exit_failure;
    }
    result<boost::json::value> tools_doc = boost::json::value();
    if (auto path = args.value("--tools")) {
        tools_doc = read_json(*path, "--tools");
        if (!tools_doc || !tools_doc->is_array()) {
            std::fprintf(
                stderr, "troupe template: %s\n",
                tools_doc ? ("--tools: " + *path + " is not a JSON array").c_str() : tools_doc.message().c_str());
            return exit_failure;
        }
        tools = &tools_doc->get_array();
    }
    auto formatter = formatter_of(args);
    if (!formatter) {
        std::fprintf(stderr, "troupe template: %s\n", formatter.message().c_str());
        return exit_failure;
    }
    auto text = formatter->render({messages, tools, !args.has("--no-generation-prompt")});
    if (!text) {
        std::fprintf(stderr, "troupe template: %s\n", text.message().c_str());
        return exit_failure;
    }
    std::fwrite(text->data(), 1, text->size(), stdout);
    return exit_ok;
}

}  // namespace troupe::cli
