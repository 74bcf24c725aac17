// Engine and sampling flags -> config overrides (see engine_flags.h).
#include "cli/engine_flags.h"

#include <yaml-cpp/yaml.h>

namespace troupe::cli {
namespace {

enum class value_kind { raw, string, switch_on };

struct flag_key {
    std::string_view flag;
    std::string_view key;
    value_kind kind;
};

constexpr flag_key flag_keys[] = {
    {"--model", "model", value_kind::string},
    {"--device", "device", value_kind::raw},
    {"--threads", "threads", value_kind::raw},
    {"--log-level", "log_level", value_kind::raw},
    {"--temperature", "sampling.temperature", value_kind::raw},
    {"--top-k", "sampling.top_k", value_kind::raw},
    {"--top-p", "sampling.top_p", value_kind::raw},
    {"--min-p", "sampling.min_p", value_kind::raw},
    {"--repeat-penalty", "sampling.repetition_penalty", value_kind::raw},
    {"--repeat-last-n", "sampling.penalty_last_n", value_kind::raw},
    {"--frequency-penalty", "sampling.frequency_penalty", value_kind::raw},
    {"--presence-penalty", "sampling.presence_penalty", value_kind::raw},
    {"--seed", "sampling.seed", value_kind::raw},
    {"--max-tokens", "sampling.max_tokens", value_kind::raw},
    {"--ignore-eos", "sampling.ignore_eos", value_kind::switch_on},
};

// A YAML scalar that reads back as exactly `text` (paths with ': ' or '#' in them stay strings).
std::string quoted(const std::string& text) {
    YAML::Emitter e;
    e << YAML::DoubleQuoted << text;
    return e.c_str();
}

}  // namespace

std::vector<flag_spec> engine_flags() {
    return {
        {"--config", "-c", "FILE", "YAML config file (see config/default.yaml)"},
        {"--model", "-m", "FILE", "GGUF model file (also $TROUPE_MODEL)"},
        {"--device", "", "NAME", "cpu or cuda"},
        {"--threads", "-t", "N", "CPU threads, 0 = all cores"},
        {"--log-level", "", "LEVEL", "debug, info, warn or error"},
        {"--set", "", "KEY=VALUE", "any config key, e.g. --set scheduler.max_batched_tokens=512", true},
    };
}

std::vector<flag_spec> sampling_flags() {
    return {
        {"--temperature", "", "T", "sampling temperature, 0 = greedy"},
        {"--top-k", "", "K", "keep the K most likely tokens, 0 = off"},
        {"--top-p", "", "P", "nucleus sampling mass, 1 = off"},
        {"--min-p", "", "P", "drop tokens below P times the best, 0 = off"},
        {"--repeat-penalty", "", "X", "repetition penalty, 1 = off"},
        {"--repeat-last-n", "", "N", "tokens the penalties look at, -1 = all"},
        {"--frequency-penalty", "", "X", "frequency penalty (OpenAI style)"},
        {"--presence-penalty", "", "X", "presence penalty (OpenAI style)"},
        {"--seed", "", "N", "seed of this request's random generator"},
        {"--max-tokens", "-n", "N", "most tokens to generate"},
        {"--stop", "", "TEXT", "stop string (backslash escapes like \\n work)", true},
        {"--ignore-eos", "", "", "keep generating past end-of-generation tokens"},
    };
}

result<std::vector<config_override>> flag_overrides(const cli_args& args) {
    std::vector<config_override> out;
    for (const auto& fk : flag_keys) {
        auto v = args.value(fk.flag);
        if (!v) continue;
        std::string value;
        switch (fk.kind) {
            case value_kind::raw:
                value = *v;
                break;
            case value_kind::string:
                value = quoted(*v);
                break;
            case value_kind::switch_on:
                value = "true";
                break;
        }
        out.push_back({std::string(fk.key), value, std::string(fk.flag)});
    }
    if (args.has("--stop")) {
        YAML::Emitter e;
        e << YAML::Flow << YAML::BeginSeq;
        for (const auto& s : args.all("--stop")) e << YAML::DoubleQuoted << unescape(s);
        e << YAML::EndSeq;
        out.push_back({"sampling.stop_strings", e.c_str(), "--stop"});
    }
    for (const auto& s : args.all("--set")) {
        auto o = parse_override(s, "--set");
        if (!o) return o.err();
        out.push_back(std::move(*o));
    }
    return out;
}

result<engine_config> resolve_cli_config(const cli_args& args) {
    auto overrides = flag_overrides(args);
    if (!overrides) return overrides.err();
    return resolve_config(args.value_or("--config", ""), *overrides);
}

std::string unescape(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '\\' || i + 1 == text.size()) {
            out += text[i];
            continue;
        }
        const char c = text[++i];
        switch (c) {
            case 'n':
                out += '\n';
                break;
            case 't':
                out += '\t';
                break;
            case 'r':
                out += '\r';
                break;
            case '\\':
                out += '\\';
                break;
            case '"':
                out += '"';
                break;
            case '\'':
                out += '\'';
                break;
            default:
                out += '\\';
                out += c;
        }
    }
    return out;
}

}  // namespace troupe::cli
