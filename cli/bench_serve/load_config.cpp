// Reading a load experiment: one walk over the YAML tree that fills load_config and collects every problem
// with its path and line; cross-field checks (length bounds, rates, file-only output lengths) run after the
// walk so that they are reported together with the rest. yaml-cpp throws on malformed YAML: caught here.
#include "cli/bench_serve/load_config.h"

#include "core/config/yaml_fields.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <vector>

namespace troupe::bench {

std::string_view name(endpoint_kind k) {
    switch (k) {
        case endpoint_kind::completions:
            return "completions";
        case endpoint_kind::chat:
            return "chat";
    }
    return "?";
}

std::string_view name(arrival_kind k) {
    switch (k) {
        case arrival_kind::poisson:
            return "poisson";
        case arrival_kind::fixed:
            return "fixed";
        case arrival_kind::burst:
            return "burst";
    }
    return "?";
}

std::string_view name(prompt_kind k) {
    switch (k) {
        case prompt_kind::fixed:
            return "fixed";
        case prompt_kind::uniform:
            return "uniform";
        case prompt_kind::lognormal:
            return "lognormal";
        case prompt_kind::file:
            return "file";
    }
    return "?";
}

std::string_view name(output_kind k) {
    switch (k) {
        case output_kind::fixed:
            return "fixed";
        case output_kind::uniform:
            return "uniform";
        case output_kind::lognormal:
            return "lognormal";
        case output_kind::file:
            return "file";
    }
    return "?";
}

namespace {

using yaml_fields::describe;
using yaml_fields::diagnostics;
using yaml_fields::field;
using yaml_fields::read_bool;
using yaml_fields::read_map;
using yaml_fields::read_string;

std::string num(double x) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, x);
    return std::string(buf, r.ptr);
}

void read_int(const YAML::Node& n, const std::string& path, const diagnostics& d, int32_t& out, int64_t lo,
              int64_t hi) {
    int64_t v = 0;
    const std::string s = n.IsScalar() ? n.Scalar() : "";
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (!n.IsScalar() || r.ec != std::errc{} || r.ptr != s.data() + s.size())
        return d.add(n, path, "expected an integer, got " + describe(n));
    if (v < lo || v > hi)
        return d.add(n, path, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + s);
    out = static_cast<int32_t>(v);
}

void read_seed(const YAML::Node& n, const std::string& path, const diagnostics& d, uint64_t& out) {
    uint64_t v = 0;
    const std::string s = n.IsScalar() ? n.Scalar() : "";
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (!n.IsScalar() || r.ec != std::errc{} || r.ptr != s.data() + s.size())
        return d.add(n, path, "expected a non-negative integer, got " + describe(n));
    out = v;
}

// A number >= lo (> lo when open), <= hi.
void read_number(const YAML::Node& n, const std::string& path, const diagnostics& d, double& out, double lo, bool open,
                 double hi) {
    double v = 0;
    const std::string s = n.IsScalar() ? n.Scalar() : "";
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (!n.IsScalar() || r.ec != std::errc{} || r.ptr != s.data() + s.size() || !std::isfinite(v))
        return d.add(n, path, "expected a number, got " + describe(n));
    if ((open ? !(v > lo) : !(v >= lo)) || v > hi)
        return d.add(n, path,
                     "must be " + std::string(open ? "> " : ">= ") + num(lo) + " and <= " + num(hi) + ", got " + s);
    out = v;
}

template <class E>
void read_enum(const YAML::Node& n, const std::string& path, const diagnostics& d, E& out,
               std::initializer_list<E> all) {
    std::string valid;
    for (E e : all) valid += (valid.empty() ? "" : ", ") + std::string(name(e));
    if (n.IsScalar()) {
        for (E e : all) {
            if (name(e) == n.Scalar()) return void(out = e);
        }
        return d.add(n, path, "unknown value '" + n.Scalar() + "' (valid: " + valid + ")");
    }
    d.add(n, path, "expected one of " + valid + ", got " + describe(n));
}

constexpr int64_t max_tokens_limit = 1 << 20;
// ln(length)'s standard deviation: ShareGPT's output lengths fit about 1; past a few every draw is clipped.
constexpr double max_sigma = 10.0;

void read_root(const YAML::Node& root, const diagnostics& d, load_config& c) {
    auto& t = c.target;
    auto& a = c.arrivals;
    auto& p = c.prompt;
    auto& o = c.output;
    auto& s = c.slo;
    read_map(
        root, "", d,
        {
            {"name", [&](auto& n, auto& path) { read_string(n, path, d, c.name); }},
            {"target",
             [&](auto& n, auto& path) {
                 read_map(
                     n, path, d,
                     {
                         {"url", [&](auto& m, auto& q) { read_string(m, q, d, t.url); }},
                         {"model", [&](auto& m, auto& q) { read_string(m, q, d, t.model); }},
                         {"endpoint",
                          [&](auto& m, auto& q) {
                              read_enum(m, q, d, t.endpoint, {endpoint_kind::completions, endpoint_kind::chat});
                          }},
                         {"timeout_s", [&](auto& m, auto& q) { read_number(m, q, d, t.timeout_s, 0, true, 86400); }},
                         {"admin_token", [&](auto& m, auto& q) { read_string(m, q, d, t.admin_token); }},
                     });
             }},
            {"n_requests", [&](auto& n, auto& path) { read_int(n, path, d, c.n_requests, 1, 1000000); }},
            {"warmup_requests", [&](auto& n, auto& path) { read_int(n, path, d, c.warmup_requests, 0, 10000); }},
            {"max_concurrency", [&](auto& n, auto& path) { read_int(n, path, d, c.max_concurrency, 0, 100000); }},
            {"seed", [&](auto& n, auto& path) { read_seed(n, path, d, c.seed); }},
            {"arrivals",
             [&](auto& n, auto& path) {
                 read_map(
                     n, path, d,
                     {
                         {"kind",
                          [&](auto& m, auto& q) {
                              read_enum(m, q, d, a.kind,
                                        {arrival_kind::poisson, arrival_kind::fixed, arrival_kind::burst});
                          }},
                         {"rate_per_s", [&](auto& m, auto& q) { read_number(m, q, d, a.rate_per_s, 0, false, 1e6); }},
                     });
             }},
            {"prompt",
             [&](auto& n, auto& path) {
                 read_map(
                     n, path, d,
                     {
                         {"kind",
                          [&](auto& m, auto& q) {
                              read_enum(m, q, d, p.kind,
                                        {prompt_kind::fixed, prompt_kind::uniform, prompt_kind::lognormal,
                                         prompt_kind::file});
                          }},
                         {"tokens", [&](auto& m, auto& q) { read_int(m, q, d, p.tokens, 1, max_tokens_limit); }},
                         {"min_tokens",
                          [&](auto& m, auto& q) { read_int(m, q, d, p.min_tokens, 0, max_tokens_limit); }},
                         {"max_tokens",
                          [&](auto& m, auto& q) { read_int(m, q, d, p.max_tokens, 0, max_tokens_limit); }},
                         {"median_tokens",
                          [&](auto& m, auto& q) { read_int(m, q, d, p.median_tokens, 1, max_tokens_limit); }},
                         {"sigma", [&](auto& m, auto& q) { read_number(m, q, d, p.sigma, 0, true, max_sigma); }},
                         {"source", [&](auto& m, auto& q) { read_string(m, q, d, p.source); }},
                         {"tokenizer", [&](auto& m, auto& q) { read_string(m, q, d, p.tokenizer); }},
                         {"shared_prefix_tokens",
                          [&](auto& m, auto& q) { read_int(m, q, d, p.shared_prefix_tokens, 0, max_tokens_limit); }},
                     });
             }},
            {"output",
             [&](auto& n, auto& path) {
                 read_map(
                     n, path, d,
                     {
                         {"kind",
                          [&](auto& m, auto& q) {
                              read_enum(m, q, d, o.kind,
                                        {output_kind::fixed, output_kind::uniform, output_kind::lognormal,
                                         output_kind::file});
                          }},
                         {"tokens", [&](auto& m, auto& q) { read_int(m, q, d, o.tokens, 1, max_tokens_limit); }},
                         {"min_tokens",
                          [&](auto& m, auto& q) { read_int(m, q, d, o.min_tokens, 0, max_tokens_limit); }},
                         {"max_tokens",
                          [&](auto& m, auto& q) { read_int(m, q, d, o.max_tokens, 0, max_tokens_limit); }},
                         {"median_tokens",
                          [&](auto& m, auto& q) { read_int(m, q, d, o.median_tokens, 1, max_tokens_limit); }},
                         {"sigma", [&](auto& m, auto& q) { read_number(m, q, d, o.sigma, 0, true, max_sigma); }},
                         {"ignore_eos", [&](auto& m, auto& q) { read_bool(m, q, d, o.ignore_eos); }},
                         {"temperature", [&](auto& m, auto& q) { read_number(m, q, d, o.temperature, 0, false, 100); }},
                     });
             }},
            {"metrics_interval_s",
             [&](auto& n, auto& path) { read_number(n, path, d, c.metrics_interval_s, 0, false, 3600); }},
            {"slo",
             [&](auto& n, auto& path) {
                 read_map(n, path, d,
                          {
                              {"ttft_ms", [&](auto& m, auto& q) { read_number(m, q, d, s.ttft_ms, 0, false, 1e9); }},
                              {"tpot_ms", [&](auto& m, auto& q) { read_number(m, q, d, s.tpot_ms, 0, false, 1e9); }},
                              {"e2e_ms", [&](auto& m, auto& q) { read_number(m, q, d, s.e2e_ms, 0, false, 1e9); }},
                          });
             }},
        });
}

// A key's node for cross-field messages (its line), or the root when absent.
YAML::Node node_at(const YAML::Node& root, std::initializer_list<const char*> keys) {
    YAML::Node n = root;
    for (const char* k : keys) {
        if (!n.IsMap() || !n[k]) return root;
        n.reset(n[k]);  // rebinds n: assigning a YAML::Node would overwrite the node it refers to
    }
    return n;
}

// A key present in the file (a bad value there was reported when it was read).
bool given(const YAML::Node& root, const char* section, const char* key) {
    return root.IsMap() && root[section].IsMap() && root[section][key];
}

// min_tokens..max_tokens, both required, for the uniform and lognormal kinds.
void check_bounds(const YAML::Node& root, const diagnostics& d, const char* section, std::string_view kind, int32_t lo,
                  int32_t hi) {
    const std::string s = section;
    const std::string when = "required when " + s + ".kind is " + std::string(kind);
    if (lo == 0) d.add(node_at(root, {section, "kind"}), s + ".min_tokens", when);
    if (hi == 0) d.add(node_at(root, {section, "kind"}), s + ".max_tokens", when);
    if (lo > 0 && hi > 0 && lo > hi) {
        d.add(node_at(root, {section, "min_tokens"}), s + ".min_tokens",
              "must be <= " + s + ".max_tokens (" + std::to_string(hi) + "), got " + std::to_string(lo));
    }
}

// The lognormal kind: bounds as uniform, a median inside them, a sigma (both read as > 0 when given).
void check_lognormal(const YAML::Node& root, const diagnostics& d, const char* section, int32_t lo, int32_t hi,
                     int32_t median) {
    const std::string s = section;
    check_bounds(root, d, section, "lognormal", lo, hi);
    for (const char* key : {"median_tokens", "sigma"}) {
        if (!given(root, section, key)) {
            d.add(node_at(root, {section, "kind"}), s + "." + key, "required when " + s + ".kind is lognormal");
        }
    }
    if (median > 0 && lo > 0 && median < lo) {
        d.add(node_at(root, {section, "median_tokens"}), s + ".median_tokens",
              "must be >= " + s + ".min_tokens (" + std::to_string(lo) + "), got " + std::to_string(median));
    }
    if (median > 0 && hi > 0 && median > hi) {
        d.add(node_at(root, {section, "median_tokens"}), s + ".median_tokens",
              "must be <= " + s + ".max_tokens (" + std::to_string(hi) + "), got " + std::to_string(median));
    }
}

void check_consistency(const YAML::Node& root, const diagnostics& d, const load_config& c) {
    if (c.arrivals.kind != arrival_kind::burst && c.arrivals.rate_per_s <= 0) {
        d.add(node_at(root, {"arrivals", "kind"}), "arrivals.rate_per_s",
              "must be > 0 when arrivals.kind is " + std::string(name(c.arrivals.kind)) + ", got " +
                  num(c.arrivals.rate_per_s));
    }
    const auto& p = c.prompt;
    const auto& o = c.output;
    if (p.kind == prompt_kind::uniform) check_bounds(root, d, "prompt", "uniform", p.min_tokens, p.max_tokens);
    if (o.kind == output_kind::uniform) check_bounds(root, d, "output", "uniform", o.min_tokens, o.max_tokens);
    if (p.kind == prompt_kind::lognormal)
        check_lognormal(root, d, "prompt", p.min_tokens, p.max_tokens, p.median_tokens);
    if (o.kind == output_kind::lognormal)
        check_lognormal(root, d, "output", o.min_tokens, o.max_tokens, o.median_tokens);
    if (c.prompt.source.empty())
        d.add(node_at(root, {"prompt", "source"}), "prompt.source", "a text or JSON file is required");
    const bool json_source = c.prompt.source.ends_with(".json");
    if (c.output.kind == output_kind::file && !(c.prompt.kind == prompt_kind::file && json_source)) {
        d.add(node_at(root, {"output", "kind"}), "output.kind",
              "'file' takes the lengths of a conversations file's replies: it needs prompt.kind: file and a .json "
              "prompt.source");
    }
    if (c.target.url.rfind("http://", 0) != 0) {
        d.add(node_at(root, {"target", "url"}), "target.url",
              "expected an http:// address like http://127.0.0.1:8080, got '" + c.target.url + "'");
    }
}

std::string file_stem(const std::string& path) {
    size_t slash = path.find_last_of('/');
    std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    size_t dot = base.find_last_of('.');
    return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

// "\n  median_tokens: M\n  sigma: S" for the keys that were given (to_yaml): 0 would not read back.
std::string lognormal_keys(int32_t median_tokens, double sigma) {
    std::string s;
    if (median_tokens > 0) s += "\n  median_tokens: " + std::to_string(median_tokens);
    if (sigma > 0) s += "\n  sigma: " + num(sigma);
    return s;
}

}  // namespace

result<load_config> parse_load_config(std::string_view yaml_text, std::string_view source) {
    std::vector<std::string> errors;
    const diagnostics d{std::string(source), true, &errors};
    load_config c;
    YAML::Node root;
    try {
        root = YAML::Load(std::string(yaml_text));
    } catch (const YAML::Exception& e) {
        return make_error(std::string(source) + ":" + std::to_string(e.mark.line + 1) + ": malformed YAML: " + e.msg);
    }
    read_root(root, d, c);
    check_consistency(root, d, c);
    if (errors.empty()) return c;
    if (errors.size() == 1) return make_error(errors[0]);
    std::string msg = std::string(source) + ": " + std::to_string(errors.size()) + " errors:";
    for (const auto& e : errors) msg += "\n  " + e;
    return make_error(msg);
}

result<load_config> load_load_config_file(const std::string& path, std::span<const std::string> overrides) {
    std::ifstream in(path);
    if (!in) return make_error(path + ": cannot open the load config");
    std::stringstream ss;
    ss << in.rdbuf();
    auto c = parse_load_config(ss.str(), path);
    if (c && !overrides.empty()) {
        YAML::Node root;
        try {
            root = YAML::Load(ss.str());
            if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
            for (const auto& o : overrides) {
                const size_t eq = o.find('=');
                if (eq == std::string::npos || eq == 0) {
                    return make_error("--set: expected key.path=value, got '" + o + "'");
                }
                const std::string key = o.substr(0, eq);
                YAML::Node node = root;
                size_t start = 0;
                while (true) {
                    const size_t dot = key.find('.', start);
                    const std::string part =
                        key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
                    if (part.empty()) return make_error("--set: empty key part in '" + key + "'");
                    if (dot == std::string::npos) {
                        node[part] = YAML::Load(o.substr(eq + 1));
                        break;
                    }
                    if (!node[part].IsMap()) node[part] = YAML::Node(YAML::NodeType::Map);
                    node.reset(node[part]);
                    start = dot + 1;
                }
            }
        } catch (const YAML::Exception& e) {
            return make_error("--set: malformed YAML value: " + e.msg);
        }
        YAML::Emitter out;
        out << root;
        c = parse_load_config(out.c_str(), path + " with --set");
    }
    if (c && c->name.empty()) c->name = file_stem(path);
    return c;
}

std::string to_yaml(const load_config& c) {
    std::ostringstream o;
    o << "name: \"" << c.name << "\"\n";
    o << "target:\n  url: \"" << c.target.url << "\"\n  model: \"" << c.target.model
      << "\"\n  endpoint: " << name(c.target.endpoint) << "\n  timeout_s: " << num(c.target.timeout_s)
      << "\n  admin_token: \"" << c.target.admin_token << "\"\n";
    o << "n_requests: " << c.n_requests << "\nwarmup_requests: " << c.warmup_requests
      << "\nmax_concurrency: " << c.max_concurrency << "\nseed: " << c.seed << "\n";
    o << "arrivals:\n  kind: " << name(c.arrivals.kind) << "\n  rate_per_s: " << num(c.arrivals.rate_per_s) << "\n";
    o << "prompt:\n  kind: " << name(c.prompt.kind) << "\n  tokens: " << c.prompt.tokens
      << "\n  min_tokens: " << c.prompt.min_tokens << "\n  max_tokens: " << c.prompt.max_tokens
      << lognormal_keys(c.prompt.median_tokens, c.prompt.sigma) << "\n  source: \"" << c.prompt.source
      << "\"\n  tokenizer: \"" << c.prompt.tokenizer << "\"\n  shared_prefix_tokens: " << c.prompt.shared_prefix_tokens
      << "\n";
    o << "output:\n  kind: " << name(c.output.kind) << "\n  tokens: " << c.output.tokens
      << "\n  min_tokens: " << c.output.min_tokens << "\n  max_tokens: " << c.output.max_tokens
      << lognormal_keys(c.output.median_tokens, c.output.sigma)
      << "\n  ignore_eos: " << (c.output.ignore_eos ? "true" : "false")
      << "\n  temperature: " << num(c.output.temperature) << "\n";
    o << "metrics_interval_s: " << num(c.metrics_interval_s) << "\n";
    o << "slo:\n  ttft_ms: " << num(c.slo.ttft_ms) << "\n  tpot_ms: " << num(c.slo.tpot_ms)
      << "\n  e2e_ms: " << num(c.slo.e2e_ms) << "\n";
    return o.str();
}

}  // namespace troupe::bench
