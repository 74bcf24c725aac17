#include "core/plugin_host/plugin_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <thread>
#include <vector>

#include "core/log/log.h"

namespace troupe {
namespace {

void host_log(void* host_ctx, int32_t level, const char* source, const char* message) {
    log_level l = log_level::error;
    switch (level) {
        case TROUPE_LOG_LEVEL_DEBUG:
            l = log_level::debug;
            break;
        case TROUPE_LOG_LEVEL_INFO:
            l = log_level::info;
            break;
        case TROUPE_LOG_LEVEL_WARN:
            l = log_level::warn;
            break;
        case TROUPE_LOG_LEVEL_ERROR:
            l = log_level::error;
            break;
        default:
            break;  // an int from outside: unknown levels log as errors
    }
    const std::string component = std::string("plugin ") + (source != nullptr ? source : "?");
    log_message(l, component, "%s", message != nullptr ? message : "");
}

// Splits [0, n) into one range per hardware thread (at most n) and runs them on fresh threads.
int32_t host_parallel_for(void* host_ctx, int64_t n, troupe_range_fn fn, void* fn_ctx) {
    if (n <= 0) return TROUPE_OK;
    const int64_t n_threads = std::min<int64_t>(n, std::max(1u, std::thread::hardware_concurrency()));
    if (n_threads == 1) {
        fn(fn_ctx, 0, n);
        return TROUPE_OK;
    }
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(n_threads - 1));
    for (int64_t i = 1; i < n_threads; ++i) {
        threads.emplace_back([=] { fn(fn_ctx, n * i / n_threads, n * (i + 1) / n_threads); });
    }
    fn(fn_ctx, 0, n / n_threads);
    for (std::thread& t : threads) t.join();
    return TROUPE_OK;
}

std::string prefix(const std::string& label) {
    return "plugin " + label + ": ";
}

// Checks that `table` (an op table of the descriptor) is present and has the functions `fns` (each a field the
// table's struct_size must contain and that must be non-null). Tables are read by field (TROUPE_HAS_FIELD), so a
// table built against an older header that lacks only optional trailing fields is fine.
struct required_fn {
    const char* name;
    bool present;  // contained in struct_size and non-null
};

template <class table_type>
status check_table(const std::string& label, const char* what, const table_type* table,
                   std::initializer_list<required_fn> fns) {
    if (table == nullptr) return make_error(prefix(label) + "descriptor has no " + what + " op table");
    if (table->struct_size < offsetof(table_type, version) + sizeof(table->version)) {
        return make_error(prefix(label) + what + " op table is " + std::to_string(table->struct_size) +
                          " bytes, too small to be one");
    }
    for (const required_fn& fn : fns) {
        if (!fn.present) return make_error(prefix(label) + what + " op table lacks " + fn.name);
    }
    return status::success();
}

#define TROUPE_TABLE_FN(table, type, field)                                                            \
    required_fn {                                                                                      \
#field, (table) != nullptr&& TROUPE_HAS_FIELD(table, type, field) && (table)->field != nullptr \
    }

std::string kind_found(int32_t c_kind) {
    for (plugin_kind k : all_plugin_kinds) {
        if (to_c_kind(k) == c_kind) return std::string(plugin_kind_name(k));
    }
    return "unknown kind " + std::to_string(c_kind);
}

status check_quant_tables(const troupe_plugin_descriptor* d, const std::string& label) {
    const troupe_quant_ops* quant = d->quant;
    const troupe_quantize_ops* quantize = descriptor_quantize_ops(*d);
    if (quant == nullptr && quantize == nullptr) {
        return make_error(prefix(label) +
                          "descriptor has neither a quant op table (runtime matmul) nor a quantize op table "
                          "(offline quantization); a quant plugin needs one or both");
    }
    if (quant != nullptr) {
        using t = troupe_quant_ops;
        if (status s = check_table(label, "quant", quant,
                                   {TROUPE_TABLE_FN(quant, t, claims), TROUPE_TABLE_FN(quant, t, prepare),
                                    TROUPE_TABLE_FN(quant, t, matmul), TROUPE_TABLE_FN(quant, t, release)});
            !s.ok()) {
            return s;
        }
    }
    if (quantize != nullptr) {
        using t = troupe_quantize_ops;
        return check_table(label, "quantize", quantize,
                           {TROUPE_TABLE_FN(quantize, t, can_write), TROUPE_TABLE_FN(quantize, t, quantize_group)});
    }
    return status::success();
}

status check_kind_tables(const troupe_plugin_descriptor* d, plugin_kind expected, const std::string& label) {
    switch (expected) {
        case plugin_kind::attention: {
            using t = troupe_attention_ops;
            return check_table(label, "attention", d->attention, {TROUPE_TABLE_FN(d->attention, t, forward)});
        }
        case plugin_kind::quant:
            return check_quant_tables(d, label);
        case plugin_kind::spec: {
            using t = troupe_spec_ops;
            // propose (version 1) or propose_batch (version 2): one of the two.
            const required_fn either{
                "propose or propose_batch",
                TROUPE_TABLE_FN(d->spec, t, propose).present || TROUPE_TABLE_FN(d->spec, t, propose_batch).present};
            return check_table(label, "spec", d->spec, {either});
        }
        case plugin_kind::kv: {
            using t = troupe_kv_ops;
            const troupe_kv_ops* kv = descriptor_kv_ops(*d);
            return check_table(label, "kv", kv, {TROUPE_TABLE_FN(kv, t, layout), TROUPE_TABLE_FN(kv, t, forward)});
        }
    }
    TROUPE_ASSERT(false, "plugin_kind out of range");
}

// The descriptor of ABI 1 ends at `spec`; ABI 2 appends kv, quantize and taps, read only when struct_size has them.
constexpr size_t descriptor_v1_size = offsetof(troupe_plugin_descriptor, spec) + sizeof(troupe_plugin_descriptor::spec);

status check_descriptor(const troupe_plugin_descriptor* d, plugin_kind expected, const std::string& label,
                        const std::string& path) {
    if (d->struct_size < offsetof(troupe_plugin_descriptor, abi_version) + sizeof(d->abi_version)) {
        return make_error(prefix(label) + "descriptor is too small (" + std::to_string(d->struct_size) + " bytes)");
    }
    if (d->abi_version < plugin_host_abi_min || d->abi_version > plugin_host_abi_max) {
        return make_error(prefix(label) + "plugin ABI version " + std::to_string(d->abi_version) +
                          " is not supported by this host (host ABI versions " + std::to_string(plugin_host_abi_min) +
                          ".." + std::to_string(plugin_host_abi_max) + "); rebuild the plugin against this troupe");
    }
    if (d->struct_size < descriptor_v1_size) {
        return make_error(prefix(label) + "descriptor is " + std::to_string(d->struct_size) + " bytes, ABI version " +
                          std::to_string(d->abi_version) + " needs at least " + std::to_string(descriptor_v1_size));
    }
    if (d->kind != to_c_kind(expected)) {
        const std::string found = kind_found(d->kind);
        const char* article = found == "attention" ? "an " : "a ";
        return make_error(prefix(label) + path + " is " + article + found + " plugin, expected " +
                          std::string(plugin_kind_name(expected)));
    }
    if (d->name == nullptr || d->create == nullptr || d->destroy == nullptr || d->error_message == nullptr) {
        return make_error(prefix(label) + "descriptor lacks one of name, create, destroy, error_message");
    }
    if (status s = check_kind_tables(d, expected, label); !s.ok()) return s;
    if (const troupe_tap_ops* taps = descriptor_tap_ops(*d); taps != nullptr) {
        using t = troupe_tap_ops;
        return check_table(label, "taps", taps, {TROUPE_TABLE_FN(taps, t, wanted), TROUPE_TABLE_FN(taps, t, observe)});
    }
    return status::success();
}

}  // namespace

const troupe_host_services* plugin_host_services() {
    static const troupe_host_services services = {
        sizeof(troupe_host_services), TROUPE_HOST_SERVICES_VERSION, nullptr, host_log, host_parallel_for,
    };
    return &services;
}

result<std::shared_ptr<plugin_library>> plugin_library::open(const std::string& path, plugin_kind expected,
                                                             const std::string& label) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
        return make_error(prefix(label) + "no such file: " + path);
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* why = dlerror();
        return make_error(prefix(label) + "cannot load " + path + ": " +
                          (why != nullptr ? why : "unknown dlopen error"));
    }
    auto close = [handle](error e) {
        dlclose(handle);
        return e;
    };
    dlerror();
    auto query = reinterpret_cast<troupe_plugin_query_fn>(dlsym(handle, TROUPE_PLUGIN_ENTRY_POINT));
    if (query == nullptr) {
        return close(make_error(prefix(label) + path +
                                " does not export the entry point " TROUPE_PLUGIN_ENTRY_POINT
                                " (not a troupe plugin, or built without TROUPE_PLUGIN_EXPORT)"));
    }
    const troupe_plugin_descriptor* desc = query(plugin_host_abi_min, plugin_host_abi_max, plugin_host_services());
    if (desc == nullptr) {
        return close(make_error(prefix(label) +
                                TROUPE_PLUGIN_ENTRY_POINT " returned no descriptor for host ABI versions " +
                                std::to_string(plugin_host_abi_min) + ".." + std::to_string(plugin_host_abi_max)));
    }
    if (status s = check_descriptor(desc, expected, label, path); !s.ok()) return close(s.err());
    plugin_info info{expected,
                     desc->name,
                     desc->plugin_version != nullptr ? desc->plugin_version : "",
                     desc->description != nullptr ? desc->description : "",
                     path,
                     desc->abi_version};
    TROUPE_LOG_INFO("plugin_host", "loaded %s %s (ABI %u) from %s", label.c_str(), info.version.c_str(),
                    info.abi_version, path.c_str());
    return std::shared_ptr<plugin_library>(new plugin_library(handle, desc, std::move(info), label));
}

plugin_library::plugin_library(void* handle, const troupe_plugin_descriptor* desc, plugin_info info, std::string label)
    : handle_(handle), desc_(desc), info_(std::move(info)), label_(std::move(label)) {}

plugin_library::~plugin_library() {
    dlclose(handle_);
}

const troupe_kv_ops* descriptor_kv_ops(const troupe_plugin_descriptor& d) {
    return TROUPE_HAS_FIELD(&d, troupe_plugin_descriptor, kv) ? d.kv : nullptr;
}

const troupe_quantize_ops* descriptor_quantize_ops(const troupe_plugin_descriptor& d) {
    return TROUPE_HAS_FIELD(&d, troupe_plugin_descriptor, quantize) ? d.quantize : nullptr;
}

const troupe_tap_ops* descriptor_tap_ops(const troupe_plugin_descriptor& d) {
    return TROUPE_HAS_FIELD(&d, troupe_plugin_descriptor, taps) ? d.taps : nullptr;
}

int32_t plugin_library::score(plugin_backend backend) const {
    if (desc_->score == nullptr) return backend == plugin_backend::cpu ? 0 : -1;
    return desc_->score(to_c_backend(backend));
}

}  // namespace troupe
