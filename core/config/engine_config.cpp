// Names, memory sizes and YAML printing for engine_config.
#include "core/config/engine_config.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>

namespace troupe {
namespace {

struct size_unit {
    std::string_view suffix;
    uint64_t factor;
};

// Longest suffixes first so "MiB" is not read as "B".
constexpr size_unit size_units[] = {
    {"TiB", uint64_t{1} << 40},
    {"GiB", uint64_t{1} << 30},
    {"MiB", uint64_t{1} << 20},
    {"KiB", uint64_t{1} << 10},
    {"TB", 1000000000000ull},
    {"GB", 1000000000ull},
    {"MB", 1000000ull},
    {"KB", 1000ull},
    {"B", 1},
};

std::string format_float(double x) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, x);
    return std::string(buf, r.ptr);
}

std::string format_float(float x) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, x);
    return std::string(buf, r.ptr);
}

// Emits a YAML tree in flow style whatever style its nodes were parsed with.
void emit_flow(YAML::Emitter& out, const YAML::Node& node) {
    switch (node.Type()) {
        case YAML::NodeType::Map:
            out << YAML::Flow << YAML::BeginMap;
            for (const auto& kv : node) {
                out << YAML::Key;
                emit_flow(out, kv.first);
                out << YAML::Value;
                emit_flow(out, kv.second);
            }
            out << YAML::EndMap;
            return;
        case YAML::NodeType::Sequence:
            out << YAML::Flow << YAML::BeginSeq;
            for (const auto& item : node) emit_flow(out, item);
            out << YAML::EndSeq;
            return;
        case YAML::NodeType::Scalar:
            out << node.Scalar();
            return;
        case YAML::NodeType::Null:
        case YAML::NodeType::Undefined:
            out << YAML::Null;
            return;
    }
}

void emit_plugin_map(YAML::Emitter& out, const plugin_config& p) {
    out << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted << p.name;
    out << YAML::Key << "path" << YAML::Value << YAML::DoubleQuoted << p.path;
    out << YAML::Key << "params" << YAML::Value;
    if (p.params.IsDefined() && !p.params.IsNull()) {
        emit_flow(out, p.params);
    } else {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
    }
    out << YAML::EndMap;
}

void emit_plugin(YAML::Emitter& out, std::string_view key, const plugin_config& p) {
    out << YAML::Key << std::string(key) << YAML::Value;
    emit_plugin_map(out, p);
}

}  // namespace

std::vector<plugin_config> plugins_config::quant_plugins() const {
    if (!quant.enabled()) return {};
    std::vector<plugin_config> all{quant};
    all.insert(all.end(), more_quant.begin(), more_quant.end());
    return all;
}

plugin_config::plugin_config(const plugin_config& other)
    : name(other.name), path(other.path), params(YAML::Clone(other.params)) {}

plugin_config& plugin_config::operator=(const plugin_config& other) {
    if (this != &other) {
        name = other.name;
        path = other.path;
        params.reset(YAML::Clone(other.params));
    }
    return *this;
}

std::string_view device_name(device_kind d) {
    switch (d) {
        case device_kind::cpu:
            return "cpu";
        case device_kind::cuda:
            return "cuda";
    }
    return "?";
}

std::optional<device_kind> parse_device(std::string_view name) {
    if (name == "cpu") return device_kind::cpu;
    if (name == "cuda") return device_kind::cuda;
    return std::nullopt;
}

std::string_view schedule_policy_name(schedule_policy p) {
    switch (p) {
        case schedule_policy::continuous:
            return "continuous";
        case schedule_policy::static_batch:
            return "static";
    }
    return "?";
}

std::optional<schedule_policy> parse_schedule_policy(std::string_view name) {
    if (name == "continuous") return schedule_policy::continuous;
    if (name == "static") return schedule_policy::static_batch;
    return std::nullopt;
}

std::string_view preemption_policy_name(preemption_policy p) {
    switch (p) {
        case preemption_policy::recompute:
            return "recompute";
        case preemption_policy::swap:
            return "swap";
    }
    return "?";
}

std::optional<preemption_policy> parse_preemption_policy(std::string_view name) {
    if (name == "recompute") return preemption_policy::recompute;
    if (name == "swap") return preemption_policy::swap;
    return std::nullopt;
}

std::string_view kernel_activations_name(kernel_activations r) {
    switch (r) {
        case kernel_activations::quantized:
            return "quantized";
        case kernel_activations::float32:
            return "float";
    }
    return "?";
}

std::optional<kernel_activations> parse_kernel_activations(std::string_view name) {
    if (name == "quantized") return kernel_activations::quantized;
    if (name == "float") return kernel_activations::float32;
    return std::nullopt;
}

std::string_view kv_cache_type_name(kv_cache_type t) {
    switch (t) {
        case kv_cache_type::f32:
            return "f32";
        case kv_cache_type::f16:
            return "f16";
    }
    return "?";
}

std::optional<kv_cache_type> parse_kv_cache_type(std::string_view name) {
    if (name == "f32") return kv_cache_type::f32;
    if (name == "f16") return kv_cache_type::f16;
    return std::nullopt;
}

std::string_view weight_memory_name(weight_memory w) {
    switch (w) {
        case weight_memory::copy:
            return "copy";
        case weight_memory::mmap:
            return "mmap";
    }
    return "?";
}

std::optional<weight_memory> parse_weight_memory(std::string_view name) {
    if (name == "copy") return weight_memory::copy;
    if (name == "mmap") return weight_memory::mmap;
    return std::nullopt;
}

std::optional<log_level> parse_log_level(std::string_view name) {
    for (log_level l : {log_level::debug, log_level::info, log_level::warn, log_level::error}) {
        if (log_level_name(l) == name) return l;
    }
    return std::nullopt;
}

uint64_t memory_budget::resolve(uint64_t device_bytes) const {
    if (bytes > 0) return bytes;
    return static_cast<uint64_t>(fraction * static_cast<double>(device_bytes));
}

result<memory_budget> parse_memory_budget(std::string_view text) {
    const auto bad = [&] {
        return make_error("expected a size like '256MiB' or '2GiB', or a fraction in (0, 1] like '0.5', got '" +
                          std::string(text) + "'");
    };
    if (text.empty()) return bad();
    std::string_view number = text;
    uint64_t factor = 0;
    for (const auto& u : size_units) {
        if (text.size() > u.suffix.size() && text.ends_with(u.suffix)) {
            number = text.substr(0, text.size() - u.suffix.size());
            factor = u.factor;
            break;
        }
    }
    while (!number.empty() && number.back() == ' ') number.remove_suffix(1);
    double value = 0.0;
    auto r = std::from_chars(number.data(), number.data() + number.size(), value);
    if (r.ec != std::errc{} || r.ptr != number.data() + number.size() || !std::isfinite(value)) return bad();
    if (factor == 0) {
        if (number.find_first_of(".eE") != std::string_view::npos) {  // a fraction
            if (!(value > 0.0 && value <= 1.0)) {
                return make_error("a fraction must be in (0, 1], got '" + std::string(text) + "'");
            }
            return memory_budget{0, value};
        }
        factor = 1;  // plain bytes
    }
    const double bytes = std::round(value * static_cast<double>(factor));
    if (!(bytes >= 1.0) || bytes > 1.8e19)
        return make_error("a size must be at least 1 byte, got '" + std::string(text) + "'");
    return memory_budget{static_cast<uint64_t>(bytes), 0.0};
}

std::string format_memory_budget(const memory_budget& m) {
    if (m.bytes == 0) {
        std::string f = format_float(m.fraction);
        if (f.find_first_of(".eE") == std::string::npos) f += ".0";  // "1" would read as one byte
        return f;
    }
    for (const auto& u : size_units) {
        if (u.suffix.size() == 3 && m.bytes % u.factor == 0)
            return std::to_string(m.bytes / u.factor) + std::string(u.suffix);
    }
    return std::to_string(m.bytes) + "B";
}

std::string params_yaml(const plugin_config& plugin) {
    if (!plugin.params.IsDefined() || plugin.params.IsNull()) return "{}";
    YAML::Emitter out;
    emit_flow(out, plugin.params);
    return out.c_str();
}

std::string to_yaml(const engine_config& c) {
    YAML::Emitter out;
    out << YAML::BeginMap;
    out << YAML::Key << "model" << YAML::Value << YAML::DoubleQuoted << c.model;
    out << YAML::Key << "device" << YAML::Value << std::string(device_name(c.device));
    out << YAML::Key << "threads" << YAML::Value << c.threads;
    out << YAML::Key << "log_level" << YAML::Value << std::string(log_level_name(c.log_level));

    const sampling_params& s = c.sampling;
    out << YAML::Key << "sampling" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "temperature" << YAML::Value << format_float(s.temperature);
    out << YAML::Key << "top_k" << YAML::Value << s.top_k;
    out << YAML::Key << "top_p" << YAML::Value << format_float(s.top_p);
    out << YAML::Key << "min_p" << YAML::Value << format_float(s.min_p);
    out << YAML::Key << "repetition_penalty" << YAML::Value << format_float(s.repetition_penalty);
    out << YAML::Key << "frequency_penalty" << YAML::Value << format_float(s.frequency_penalty);
    out << YAML::Key << "presence_penalty" << YAML::Value << format_float(s.presence_penalty);
    out << YAML::Key << "penalty_last_n" << YAML::Value << s.penalty_last_n;
    out << YAML::Key << "seed" << YAML::Value << s.seed;
    out << YAML::Key << "max_tokens" << YAML::Value << s.max_tokens;
    out << YAML::Key << "stop_tokens" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (int32_t t : s.stop_tokens) out << t;
    out << YAML::EndSeq;
    out << YAML::Key << "stop_strings" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const auto& str : s.stop_strings) out << YAML::DoubleQuoted << str;
    out << YAML::EndSeq;
    out << YAML::Key << "ignore_eos" << YAML::Value << s.ignore_eos;
    out << YAML::EndMap;

    out << YAML::Key << "scheduler" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "max_running_seqs" << YAML::Value << c.scheduler.max_running_seqs;
    out << YAML::Key << "max_batched_tokens" << YAML::Value << c.scheduler.max_batched_tokens;
    out << YAML::Key << "max_waiting" << YAML::Value << c.scheduler.max_waiting;
    out << YAML::Key << "policy" << YAML::Value << std::string(schedule_policy_name(c.scheduler.policy));
    out << YAML::Key << "preemption" << YAML::Value << std::string(preemption_policy_name(c.scheduler.preemption));
    out << YAML::Key << "adaptive_draft" << YAML::Value << c.scheduler.adaptive_draft;
    out << YAML::Key << "plan_ahead" << YAML::Value << c.scheduler.plan_ahead;
    out << YAML::EndMap;

    out << YAML::Key << "kv" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "block_size" << YAML::Value << c.kv.block_size;
    out << YAML::Key << "memory" << YAML::Value << format_memory_budget(c.kv.memory);
    out << YAML::Key << "prefix_caching" << YAML::Value << c.kv.prefix_caching;
    out << YAML::Key << "window_release" << YAML::Value << c.kv.window_release;
    out << YAML::Key << "dtype" << YAML::Value << std::string(kv_cache_type_name(c.kv.dtype));
    emit_plugin(out, "plugin", c.kv.plugin);
    out << YAML::EndMap;

    out << YAML::Key << "kernels" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "activations" << YAML::Value << std::string(kernel_activations_name(c.kernels.activations));
    out << YAML::Key << "weights" << YAML::Value << std::string(weight_memory_name(c.kernels.weights));
    out << YAML::EndMap;

    out << YAML::Key << "plugins" << YAML::Value << YAML::BeginMap;
    emit_plugin(out, "attention", c.plugins.attention);
    // A list whenever a plugin is on, so that the printed config read back (merged over the defaults) replaces the
    // default list instead of editing its first entry.
    if (!c.plugins.quant.enabled()) {
        emit_plugin(out, "quant", c.plugins.quant);
    } else {
        out << YAML::Key << "quant" << YAML::Value << YAML::BeginSeq;
        for (const plugin_config& q : c.plugins.quant_plugins()) emit_plugin_map(out, q);
        out << YAML::EndSeq;
    }
    emit_plugin(out, "spec", c.plugins.spec);
    out << YAML::Key << "plugin_dir" << YAML::Value << YAML::DoubleQuoted << c.plugins.plugin_dir;
    out << YAML::EndMap;

    emit_plugin(out, "quantize", c.quantize);

    const server_config& sv = c.server;
    out << YAML::Key << "server" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "host" << YAML::Value << YAML::DoubleQuoted << sv.host;
    out << YAML::Key << "port" << YAML::Value << sv.port;
    out << YAML::Key << "admin_token" << YAML::Value << YAML::DoubleQuoted << sv.admin_token;
    out << YAML::Key << "admin_console" << YAML::Value << sv.admin_console;
    out << YAML::Key << "max_body_bytes" << YAML::Value << sv.max_body_bytes;
    out << YAML::Key << "drain_timeout_ms" << YAML::Value << sv.drain_timeout_ms;
    out << YAML::Key << "max_prompt_tokens" << YAML::Value << sv.max_prompt_tokens;
    out << YAML::Key << "max_queue_requests" << YAML::Value << sv.max_queue_requests;
    out << YAML::Key << "max_queue_tokens" << YAML::Value << sv.max_queue_tokens;
    out << YAML::Key << "max_send_queue_bytes" << YAML::Value << sv.max_send_queue_bytes;
    out << YAML::Key << "served_model_name" << YAML::Value << YAML::DoubleQuoted << sv.served_model_name;
    out << YAML::Key << "api_key" << YAML::Value << YAML::DoubleQuoted << sv.api_key;
    out << YAML::Key << "allow_insecure" << YAML::Value << sv.allow_insecure;
    for (const auto& [key, list] :
         {std::pair<const char*, const std::vector<std::string>*>{"allowed_hosts", &sv.allowed_hosts},
          {"allowed_origins", &sv.allowed_origins},
          {"cors_origins", &sv.cors_origins}}) {
        out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
        for (const auto& str : *list) out << YAML::DoubleQuoted << str;
        out << YAML::EndSeq;
    }
    out << YAML::EndMap;

    out << YAML::EndMap;
    return std::string(out.c_str()) + "\n";
}

}  // namespace troupe
