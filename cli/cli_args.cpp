// The command-line parser (see cli_args.h).
#include "cli/cli_args.h"

#include <cctype>
#include <charconv>

namespace troupe::cli {
namespace {

const flag_spec* find_flag(const command_spec& spec, std::string_view name) {
    for (const auto& f : spec.flags) {
        if (f.name == name || (!f.short_name.empty() && f.short_name == name)) return &f;
    }
    return nullptr;
}

std::string valid_flags(const command_spec& spec) {
    std::string s;
    for (const auto& f : spec.flags) s += std::string(s.empty() ? "" : ", ") + std::string(f.name);
    s += std::string(s.empty() ? "" : ", ") + "--help";
    return s;
}

}  // namespace

bool cli_args::has(std::string_view flag) const {
    return values.find(std::string(flag)) != values.end();
}

std::optional<std::string> cli_args::value(std::string_view flag) const {
    auto it = values.find(std::string(flag));
    if (it == values.end() || it->second.empty()) return std::nullopt;
    return it->second.back();
}

std::string cli_args::value_or(std::string_view flag, std::string fallback) const {
    auto v = value(flag);
    return v ? *v : std::move(fallback);
}

std::vector<std::string> cli_args::all(std::string_view flag) const {
    auto it = values.find(std::string(flag));
    return it == values.end() ? std::vector<std::string>{} : it->second;
}

result<cli_args> parse_args(const command_spec& spec, std::span<const std::string> argv) {
    cli_args out;
    out.command = std::string(spec.name);
    bool flags_done = false;
    for (size_t i = 0; i < argv.size(); ++i) {
        const std::string& a = argv[i];
        const bool looks_like_flag = a.size() > 1 && a[0] == '-' &&
                                     !(a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.'));
        if (flags_done || !looks_like_flag) {
            out.args.push_back(a);
            continue;
        }
        if (a == "--") {
            flags_done = true;
            continue;
        }
        if (a == "--help" || a == "-h") {
            out.help = true;
            continue;
        }
        std::string name = a;
        std::optional<std::string> inline_value;
        if (auto eq = a.find('='); a.starts_with("--") && eq != std::string::npos) {
            name = a.substr(0, eq);
            inline_value = a.substr(eq + 1);
        }
        const flag_spec* f = find_flag(spec, name);
        if (!f) return make_error("unknown flag '" + name + "' (valid: " + valid_flags(spec) + ")");
        const std::string key(f->name);
        if (!f->repeatable && out.has(key)) return make_error(key + " given twice");
        if (f->value_name.empty()) {
            if (inline_value) return make_error(key + " takes no value, got '" + *inline_value + "'");
            out.values[key].push_back("true");
            continue;
        }
        if (!inline_value) {
            if (i + 1 >= argv.size()) return make_error(key + " needs a value (" + std::string(f->value_name) + ")");
            inline_value = argv[++i];
        }
        out.values[key].push_back(*inline_value);
    }
    if (out.help) return out;
    const auto n = static_cast<int>(out.args.size());
    if (n < spec.min_args || (spec.max_args >= 0 && n > spec.max_args)) {
        std::string expected;
        if (spec.max_args < 0) {
            expected = "at least " + std::to_string(spec.min_args);
        } else if (spec.min_args == spec.max_args) {
            expected = std::to_string(spec.min_args);
        } else {
            expected = std::to_string(spec.min_args) + " to " + std::to_string(spec.max_args);
        }
        std::string msg =
            "expected " + expected + " argument" + (expected == "1" ? "" : "s") + ", got " + std::to_string(n);
        if (n > 0 && spec.max_args >= 0 && n > spec.max_args) msg += " ('" + out.args.back() + "')";
        return make_error(msg);
    }
    return out;
}

std::string help_text(const command_spec& spec) {
    std::string s = std::string(spec.summary) + "\n\nusage: " + std::string(spec.usage) + "\n";
    if (!spec.flags.empty()) s += "\nflags:\n";
    for (const auto& f : spec.flags) {
        std::string left = "  ";
        if (!f.short_name.empty()) left += std::string(f.short_name) + ", ";
        left += std::string(f.name);
        if (!f.value_name.empty()) left += " " + std::string(f.value_name);
        if (left.size() < 30)
            left.resize(30, ' ');
        else
            left += "  ";
        s += left + std::string(f.help) + (f.repeatable ? " (repeatable)" : "") + "\n";
    }
    s += "  --help                      this text\n";
    if (!spec.details.empty()) s += "\n" + std::string(spec.details) + "\n";
    return s;
}

std::string join_problems(const std::vector<std::string>& problems) {
    if (problems.size() == 1) return problems[0];
    std::string s = std::to_string(problems.size()) + " problems:";
    for (const auto& p : problems) s += "\n  " + p;
    return s;
}

result<long long> parse_int_flag(std::string_view flag, std::string_view text) {
    long long v = 0;
    auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    if (r.ec != std::errc{} || r.ptr != text.data() + text.size()) {
        return make_error(std::string(flag) + ": expected an integer, got '" + std::string(text) + "'");
    }
    return v;
}

result<double> parse_float_flag(std::string_view flag, std::string_view text) {
    double v = 0;
    auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    if (r.ec != std::errc{} || r.ptr != text.data() + text.size()) {
        return make_error(std::string(flag) + ": expected a number, got '" + std::string(text) + "'");
    }
    return v;
}

}  // namespace troupe::cli
