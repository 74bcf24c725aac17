// Reading the config: one recursive walk over the YAML tree that fills the typed structs and collects
// every problem (unknown key, wrong type, out-of-range number, unknown enum name) with its path and
// line. yaml-cpp throws on malformed YAML; that is caught here, at the edge, and becomes a message.
#include "core/config/config_loader.h"

#include "core/config/yaml_fields.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <sstream>

namespace troupe {
namespace {

using yaml_fields::describe;
using yaml_fields::diagnostics;
using yaml_fields::field;
using yaml_fields::read_bool;
using yaml_fields::read_map;
using yaml_fields::read_string;

std::string join(std::initializer_list<std::string_view> names) {
    std::string s;
    for (auto n : names) {
        if (!s.empty()) s += ", ";
        s += n;
    }
    return s;
}

template <class T>
std::string num(T x) {
    if constexpr (std::is_floating_point_v<T>) {
        char buf[64];
        auto r = std::to_chars(buf, buf + sizeof buf, x);
        return std::string(buf, r.ptr);
    } else {
        return std::to_string(x);
    }
}

// The bounds of a numeric field; lo_open/hi_open make them exclusive.
template <class T>
struct range {
    T lo = std::numeric_limits<T>::lowest();
    T hi = std::numeric_limits<T>::max();
    bool lo_open = false;

    std::optional<std::string> check(T x) const {
        const bool has_lo = lo != std::numeric_limits<T>::lowest();
        const bool has_hi = hi != std::numeric_limits<T>::max();
        const bool below = lo_open ? !(x > lo) : !(x >= lo);
        const bool above = !(x <= hi);
        if (!below && !above) return std::nullopt;
        if (has_lo && has_hi) {
            return "must be " + std::string(lo_open ? "> " : "between ") + num(lo) + (lo_open ? " and <= " : " and ") +
                   num(hi) + ", got " + num(x);
        }
        if (has_lo) return "must be " + std::string(lo_open ? "> " : ">= ") + num(lo) + ", got " + num(x);
        return "must be <= " + num(hi) + ", got " + num(x);
    }
};

template <class T>
range<T> at_least(T lo) {
    return range<T>{lo, std::numeric_limits<T>::max(), false};
}

template <class T>
range<T> between(T lo, T hi) {
    return range<T>{lo, hi, false};
}

// Integers: the whole scalar must be a number that fits T.
template <class T>
void read_int(const YAML::Node& node, const std::string& path, const diagnostics& d, T& out, range<T> r) {
    const std::string what = std::is_signed_v<T> ? "an integer" : "a non-negative integer";
    if (!node.IsScalar()) return d.add(node, path, "expected " + what + ", got " + describe(node));
    const std::string& s = node.Scalar();
    T value{};
    auto res = std::from_chars(s.data(), s.data() + s.size(), value);
    if (res.ec == std::errc::result_out_of_range) return d.add(node, path, "out of range, got '" + s + "'");
    if (res.ec != std::errc{} || res.ptr != s.data() + s.size()) {
        return d.add(node, path, "expected " + what + ", got " + describe(node));
    }
    if (auto msg = r.check(value)) return d.add(node, path, *msg);
    out = value;
}

void read_float(const YAML::Node& node, const std::string& path, const diagnostics& d, float& out, range<float> r) {
    if (!node.IsScalar()) return d.add(node, path, "expected a number, got " + describe(node));
    const std::string& s = node.Scalar();
    float value = 0.0f;
    auto res = std::from_chars(s.data(), s.data() + s.size(), value);
    if (res.ec != std::errc{} || res.ptr != s.data() + s.size() || !std::isfinite(value)) {
        return d.add(node, path, "expected a number, got " + describe(node));
    }
    if (auto msg = r.check(value)) return d.add(node, path, *msg);
    out = value;
}

template <class E>
void read_enum(const YAML::Node& node, const std::string& path, const diagnostics& d, E& out,
               std::optional<E> (*parse)(std::string_view), std::initializer_list<std::string_view> valid) {
    if (!node.IsScalar()) return d.add(node, path, "expected one of " + join(valid) + ", got " + describe(node));
    if (auto v = parse(node.Scalar())) return void(out = *v);
    d.add(node, path, "unknown value '" + node.Scalar() + "' (valid: " + join(valid) + ")");
}

// A list, or one scalar read as a list of one.
template <class F>
void read_list(const YAML::Node& node, const std::string& path, const diagnostics& d, F&& read_item) {
    if (node.IsNull()) return;
    if (node.IsScalar()) return read_item(node, path);
    if (!node.IsSequence()) return d.add(node, path, "expected a list, got " + describe(node));
    for (size_t i = 0; i < node.size(); ++i) read_item(node[i], path + "[" + std::to_string(i) + "]");
}

// Deep merge of plugin params: mappings merge by key, anything else replaces. Builds a fresh node so
// that configs copied from this one (which share YAML nodes) never change.
YAML::Node merged(const YAML::Node& dst, const YAML::Node& src) {
    if (!src.IsMap() || !(dst.IsMap())) return YAML::Clone(src);
    YAML::Node out = YAML::Clone(dst);
    for (const auto& kv : src) {
        const std::string key = kv.first.Scalar();
        YAML::Node existing = out[key];
        out[key] = merged(existing, kv.second);
    }
    return out;
}

bool valid_plugin_name(const std::string& name) {
    if (name.empty()) return false;
    for (char c : name) {
        const bool ok =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!ok) return false;
    }
    return true;
}

void read_plugin(const YAML::Node& node, const std::string& path, const diagnostics& d, plugin_config& p,
                 bool can_be_none) {
    read_map(node, path, d,
             {
                 {"name",
                  [&](const YAML::Node& n, const std::string& sub) {
                      std::string name = p.name;
                      read_string(n, sub, d, name);
                      if (!valid_plugin_name(name)) {
                          return d.add(n, sub,
                                       "expected a plugin name (letters, digits, '_', '-'), got " + describe(n));
                      }
                      if (name == "none" && !can_be_none)
                          return d.add(n, sub, "an attention plugin is required, got 'none'");
                      p.name = name;
                  }},
                 {"path", [&](const YAML::Node& n, const std::string& sub) { read_string(n, sub, d, p.path); }},
                 {"params",
                  [&](const YAML::Node& n, const std::string& sub) {
                      if (n.IsNull()) return;
                      if (!n.IsMap()) return d.add(n, sub, "expected a mapping, got " + describe(n));
                      YAML::Node m = merged(p.params, n);
                      p.params.reset(m);
                  }},
             });
}

// plugins.quant: a list replaces every quant plugin (each item a name or a map with name, path, params); the
// single map form edits the first one and keeps the others.
void read_quant_plugins(const YAML::Node& node, const std::string& path, const diagnostics& d, plugins_config& p) {
    if (!node.IsSequence()) return read_plugin(node, path, d, p.quant, true);
    if (node.size() == 0) return d.add(node, path, "expected at least one plugin (or name: none), got an empty list");
    std::vector<plugin_config> list;
    for (size_t i = 0; i < node.size(); ++i) {
        const YAML::Node item = node[i];
        const std::string sub = path + "[" + std::to_string(i) + "]";
        plugin_config q;
        if (item.IsScalar()) {
            q.name = item.Scalar();
            if (!valid_plugin_name(q.name)) {
                d.add(item, sub, "expected a plugin name (letters, digits, '_', '-'), got " + describe(item));
            }
        } else {
            read_plugin(item, sub, d, q, true);
            if (q.name.empty() && q.path.empty()) d.add(item, sub, "expected a name (or a path)");
        }
        if (q.name == "none")
            d.add(item, sub, "'none' cannot be one of several quant plugins (write quant: {name: none})");
        list.push_back(std::move(q));
    }
    p.quant = list[0];
    p.more_quant.assign(list.begin() + 1, list.end());
}

void read_sampling(const YAML::Node& node, const std::string& path, const diagnostics& d, sampling_params& s) {
    read_map(
        node, path, d,
        {
            {"temperature", [&](auto& n, auto& p) { read_float(n, p, d, s.temperature, at_least(0.0f)); }},
            {"top_k", [&](auto& n, auto& p) { read_int(n, p, d, s.top_k, at_least<int32_t>(0)); }},
            {"top_p", [&](auto& n, auto& p) { read_float(n, p, d, s.top_p, between(0.0f, 1.0f)); }},
            {"min_p", [&](auto& n, auto& p) { read_float(n, p, d, s.min_p, between(0.0f, 1.0f)); }},
            {"repetition_penalty",
             [&](auto& n, auto& p) {
                 read_float(n, p, d, s.repetition_penalty, range<float>{0.0f, std::numeric_limits<float>::max(), true});
             }},
            {"frequency_penalty",
             [&](auto& n, auto& p) { read_float(n, p, d, s.frequency_penalty, between(-2.0f, 2.0f)); }},
            {"presence_penalty",
             [&](auto& n, auto& p) { read_float(n, p, d, s.presence_penalty, between(-2.0f, 2.0f)); }},
            {"penalty_last_n", [&](auto& n, auto& p) { read_int(n, p, d, s.penalty_last_n, at_least<int32_t>(-1)); }},
            {"seed", [&](auto& n, auto& p) { read_int(n, p, d, s.seed, range<uint64_t>{}); }},
            {"max_tokens", [&](auto& n, auto& p) { read_int(n, p, d, s.max_tokens, at_least<int32_t>(1)); }},
            {"stop_tokens",
             [&](auto& n, auto& p) {
                 std::vector<int32_t> tokens;
                 read_list(n, p, d, [&](const YAML::Node& item, const std::string& ip) {
                     int32_t t = -1;
                     read_int(item, ip, d, t, at_least<int32_t>(0));
                     if (t >= 0) tokens.push_back(t);
                 });
                 s.stop_tokens = std::move(tokens);
             }},
            {"stop_strings",
             [&](auto& n, auto& p) {
                 std::vector<std::string> strings;
                 read_list(n, p, d, [&](const YAML::Node& item, const std::string& ip) {
                     std::string str;
                     if (!item.IsScalar()) return d.add(item, ip, "expected a string, got " + describe(item));
                     if (item.Scalar().empty()) return d.add(item, ip, "a stop string cannot be empty");
                     strings.push_back(item.Scalar());
                 });
                 s.stop_strings = std::move(strings);
             }},
            {"ignore_eos", [&](auto& n, auto& p) { read_bool(n, p, d, s.ignore_eos); }},
        });
}

// A list of non-empty strings (host names, origins).
void read_string_list(const YAML::Node& node, const std::string& path, const diagnostics& d,
                      std::vector<std::string>& out) {
    std::vector<std::string> strings;
    read_list(node, path, d, [&](const YAML::Node& item, const std::string& ip) {
        if (!item.IsScalar()) return d.add(item, ip, "expected a string, got " + describe(item));
        if (item.Scalar().empty()) return d.add(item, ip, "expected a name, got an empty string");
        strings.push_back(item.Scalar());
    });
    out = std::move(strings);
}

void read_server(const YAML::Node& node, const std::string& path, const diagnostics& d, server_config& s) {
    read_map(
        node, path, d,
        {
            {"host",
             [&](auto& n, auto& p) {
                 std::string host = s.host;
                 read_string(n, p, d, host);
                 if (host.empty()) return d.add(n, p, "expected an address like 127.0.0.1 or 0.0.0.0, got nothing");
                 s.host = host;
             }},
            {"port", [&](auto& n, auto& p) { read_int(n, p, d, s.port, between<int32_t>(0, 65535)); }},
            {"admin_token", [&](auto& n, auto& p) { read_string(n, p, d, s.admin_token); }},
            {"admin_console", [&](auto& n, auto& p) { read_bool(n, p, d, s.admin_console); }},
            {"max_body_bytes",
             [&](auto& n, auto& p) { read_int(n, p, d, s.max_body_bytes, between<int64_t>(1024, int64_t{1} << 32)); }},
            {"drain_timeout_ms",
             [&](auto& n, auto& p) { read_int(n, p, d, s.drain_timeout_ms, between<int32_t>(0, 3600000)); }},
            {"max_prompt_tokens",
             [&](auto& n, auto& p) { read_int(n, p, d, s.max_prompt_tokens, at_least<int32_t>(0)); }},
            {"max_queue_requests",
             [&](auto& n, auto& p) { read_int(n, p, d, s.max_queue_requests, at_least<int32_t>(1)); }},
            {"max_queue_tokens",
             [&](auto& n, auto& p) { read_int(n, p, d, s.max_queue_tokens, at_least<int64_t>(1)); }},
            {"max_send_queue_bytes",
             [&](auto& n, auto& p) {
                 read_int(n, p, d, s.max_send_queue_bytes, between<int64_t>(4096, int64_t{1} << 32));
             }},
            {"served_model_name", [&](auto& n, auto& p) { read_string(n, p, d, s.served_model_name); }},
            {"api_key", [&](auto& n, auto& p) { read_string(n, p, d, s.api_key); }},
            {"allow_insecure", [&](auto& n, auto& p) { read_bool(n, p, d, s.allow_insecure); }},
            {"allowed_hosts", [&](auto& n, auto& p) { read_string_list(n, p, d, s.allowed_hosts); }},
            {"allowed_origins", [&](auto& n, auto& p) { read_string_list(n, p, d, s.allowed_origins); }},
            {"cors_origins", [&](auto& n, auto& p) { read_string_list(n, p, d, s.cors_origins); }},
        });
}

void read_config(const YAML::Node& root, const diagnostics& d, engine_config& c) {
    read_map(
        root, "", d,
        {
            {"model", [&](auto& n, auto& p) { read_string(n, p, d, c.model); }},
            {"device",
             [&](auto& n, auto& p) {
                 read_enum<device_kind>(n, p, d, c.device, parse_device, {"cpu", "cuda"});
             }},
            {"threads", [&](auto& n, auto& p) { read_int(n, p, d, c.threads, between<int32_t>(0, 4096)); }},
            {"log_level",
             [&](auto& n, auto& p) {
                 read_enum<log_level>(n, p, d, c.log_level, parse_log_level, {"debug", "info", "warn", "error"});
             }},
            {"sampling", [&](auto& n, auto& p) { read_sampling(n, p, d, c.sampling); }},
            {"scheduler",
             [&](auto& n, auto& p) {
                 read_map(n, p, d,
                          {
                              {"max_running_seqs",
                               [&](auto& n2, auto& p2) {
                                   read_int(n2, p2, d, c.scheduler.max_running_seqs, at_least<int32_t>(1));
                               }},
                              {"max_batched_tokens",
                               [&](auto& n2, auto& p2) {
                                   read_int(n2, p2, d, c.scheduler.max_batched_tokens, at_least<int32_t>(1));
                               }},
                              {"max_waiting",
                               [&](auto& n2, auto& p2) {
                                   read_int(n2, p2, d, c.scheduler.max_waiting, at_least<int32_t>(0));
                               }},
                              {"policy",
                               [&](auto& n2, auto& p2) {
                                   read_enum<schedule_policy>(n2, p2, d, c.scheduler.policy, parse_schedule_policy,
                                                              {"continuous", "static"});
                               }},
                              {"preemption",
                               [&](auto& n2, auto& p2) {
                                   read_enum<preemption_policy>(n2, p2, d, c.scheduler.preemption,
                                                                parse_preemption_policy, {"recompute", "swap"});
                               }},
                              {"adaptive_draft",
                               [&](auto& n2, auto& p2) { read_bool(n2, p2, d, c.scheduler.adaptive_draft); }},
                              {"plan_ahead",
                               [&](auto& n2, auto& p2) { read_bool(n2, p2, d, c.scheduler.plan_ahead); }},
                          });
             }},
            {"kv",
             [&](auto& n, auto& p) {
                 read_map(
                     n, p, d,
                     {
                         {"block_size",
                          [&](auto& n2, auto& p2) {
                              int32_t b = c.kv.block_size;
                              read_int(n2, p2, d, b, between<int32_t>(1, 1024));
                              if ((b & (b - 1)) != 0) {
                                  return d.add(n2, p2, "must be a power of two, got " + std::to_string(b));
                              }
                              c.kv.block_size = b;
                          }},
                         {"memory",
                          [&](auto& n2, auto& p2) {
                              if (!n2.IsScalar()) {
                                  return d.add(
                                      n2, p2,
                                      "expected a size like '256MiB' or a fraction like 0.5, got " + describe(n2));
                              }
                              auto m = parse_memory_budget(n2.Scalar());
                              if (!m) return d.add(n2, p2, m.message());
                              c.kv.memory = *m;
                          }},
                         {"prefix_caching", [&](auto& n2, auto& p2) { read_bool(n2, p2, d, c.kv.prefix_caching); }},
                         {"window_release", [&](auto& n2, auto& p2) { read_bool(n2, p2, d, c.kv.window_release); }},
                         {"dtype",
                          [&](auto& n2, auto& p2) {
                              read_enum<kv_cache_type>(n2, p2, d, c.kv.dtype, parse_kv_cache_type, {"f32", "f16"});
                          }},
                         {"plugin",
                          [&](auto& n2, auto& p2) {
                              // The short form is the name alone (kv.plugin=int8).
                              if (n2.IsScalar()) {
                                  if (!valid_plugin_name(n2.Scalar())) {
                                      return d.add(
                                          n2, p2,
                                          "expected a plugin name (letters, digits, '_', '-'), got " + describe(n2));
                                  }
                                  c.kv.plugin = plugin_config(n2.Scalar());
                                  return;
                              }
                              read_plugin(n2, p2, d, c.kv.plugin, true);
                          }},
                     });
             }},
            {"kernels",
             [&](auto& n, auto& p) {
                 read_map(n, p, d,
                          {
                              {"activations",
                               [&](auto& n2, auto& p2) {
                                   read_enum<kernel_activations>(n2, p2, d, c.kernels.activations,
                                                                 parse_kernel_activations, {"quantized", "float"});
                               }},
                              {"weights",
                               [&](auto& n2, auto& p2) {
                                   read_enum<weight_memory>(n2, p2, d, c.kernels.weights, parse_weight_memory,
                                                            {"copy", "mmap"});
                               }},
                          });
             }},
            {"plugins",
             [&](auto& n, auto& p) {
                 read_map(
                     n, p, d,
                     {
                         {"attention", [&](auto& n2, auto& p2) { read_plugin(n2, p2, d, c.plugins.attention, false); }},
                         {"quant", [&](auto& n2, auto& p2) { read_quant_plugins(n2, p2, d, c.plugins); }},
                         {"spec", [&](auto& n2, auto& p2) { read_plugin(n2, p2, d, c.plugins.spec, true); }},
                         {"plugin_dir", [&](auto& n2, auto& p2) { read_string(n2, p2, d, c.plugins.plugin_dir); }},
                     });
             }},
            {"quantize", [&](auto& n, auto& p) { read_plugin(n, p, d, c.quantize, true); }},
            {"server", [&](auto& n, auto& p) { read_server(n, p, d, c.server); }},
        });
}

// Relations between keys, checked on the whole config.
void check_consistency(const engine_config& c, const std::string& source, std::vector<std::string>& errors) {
    if (c.kv.plugin.enabled() && c.kv.dtype != kv_cache_type::f32) {
        errors.push_back(source + ": kv.dtype: " + std::string(kv_cache_type_name(c.kv.dtype)) + " with kv.plugin " +
                         c.kv.plugin.name + ": the KV plugin owns the cache's format; leave kv.dtype at f32 (or set " +
                         "kv.plugin: none)");
    }
    if (c.scheduler.max_batched_tokens < c.scheduler.max_running_seqs) {
        errors.push_back(source + ": scheduler.max_batched_tokens: must be >= scheduler.max_running_seqs (" +
                         std::to_string(c.scheduler.max_running_seqs) + "), got " +
                         std::to_string(c.scheduler.max_batched_tokens));
    }
}

status summarize(const std::string& source, std::vector<std::string>& errors) {
    if (errors.empty()) return status::success();
    if (errors.size() == 1) return make_error(errors[0]);
    std::string msg = source + ": " + std::to_string(errors.size()) + " errors:";
    for (const auto& e : errors) msg += "\n  " + e;
    return make_error(msg);
}

}  // namespace

status merge_config(engine_config& config, std::string_view yaml_text, std::string_view source) {
    const std::string src(source);
    YAML::Node root;
    try {
        root = YAML::Load(std::string(yaml_text));
    } catch (const YAML::Exception& e) {
        return make_error(src + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
    }
    std::vector<std::string> errors;
    engine_config next = config;
    read_config(root, diagnostics{src, true, &errors}, next);
    check_consistency(next, src, errors);
    if (auto s = summarize(src, errors); !s) return s;
    config = std::move(next);
    return status::success();
}

result<engine_config> parse_config(std::string_view yaml_text, std::string_view source) {
    engine_config config;
    if (auto s = merge_config(config, yaml_text, source); !s) return s.err();
    return config;
}

result<engine_config> load_config_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(path + ": cannot open the config file");
    std::stringstream text;
    text << in.rdbuf();
    if (in.bad()) return make_error(path + ": cannot read the config file");
    return parse_config(text.str(), path);
}

result<config_override> parse_override(std::string_view assignment, std::string source) {
    const auto eq = assignment.find('=');
    if (eq == std::string_view::npos || eq == 0) {
        return make_error(source + ": expected key.path=value, got '" + std::string(assignment) + "'");
    }
    return config_override{std::string(assignment.substr(0, eq)), std::string(assignment.substr(eq + 1)),
                           std::move(source)};
}

status apply_overrides(engine_config& config, std::span<const config_override> overrides) {
    std::vector<std::string> errors;
    engine_config next = config;
    for (const auto& o : overrides) {
        YAML::Node value;
        try {
            value = YAML::Load(o.value);
        } catch (const YAML::Exception& e) {
            errors.push_back(o.source + ": " + o.key + ": invalid value '" + o.value + "': " + e.msg);
            continue;
        }
        // Nest the value under its path: a.b.c=v -> {a: {b: {c: v}}}, then read it like a file.
        std::vector<std::string> keys;
        std::string_view rest = o.key;
        bool bad_key = false;
        while (true) {
            const auto dot = rest.find('.');
            std::string_view k = rest.substr(0, dot);
            if (k.empty()) bad_key = true;
            keys.emplace_back(k);
            if (dot == std::string_view::npos) break;
            rest.remove_prefix(dot + 1);
        }
        if (bad_key) {
            errors.push_back(o.source + ": '" + o.key + "': not a key path (like scheduler.max_batched_tokens)");
            continue;
        }
        YAML::Emitter e;
        for (const auto& k : keys) e << YAML::BeginMap << YAML::Key << k << YAML::Value;
        e << value;
        for (size_t i = 0; i < keys.size(); ++i) e << YAML::EndMap;
        read_config(YAML::Load(e.c_str()), diagnostics{o.source, false, &errors}, next);
    }
    check_consistency(next, overrides.empty() ? "config" : "config after overrides", errors);
    if (auto s = summarize(overrides.size() == 1 ? overrides[0].source : "overrides", errors); !s) return s;
    config = std::move(next);
    return status::success();
}

void apply_environment(engine_config& config) {
    const char* model = std::getenv("TROUPE_MODEL");
    if (model && *model) config.model = model;
}

status validate(const engine_config& config) {
    auto parsed = parse_config(to_yaml(config), "config");
    if (!parsed) return parsed.err();
    return status::success();
}

result<engine_config> resolve_config(const std::string& path, std::span<const config_override> overrides) {
    engine_config config;
    if (!path.empty()) {
        auto loaded = load_config_file(path);
        if (!loaded) return loaded.err();
        config = std::move(*loaded);
    }
    apply_environment(config);
    if (auto s = apply_overrides(config, overrides); !s) return s.err();
    return config;
}

}  // namespace troupe
