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

// Checks that `table` (an op table of the descriptor) is present, large enough and has `fns` non-null.
template <class table_type>
status check_table(const std::string& label, const char* what, const table_type* table,
                   std::initializer_list<std::pair<const char*, bool>> fns) {
    if (table == nullptr) return make_error(prefix(label) + "descriptor has no " + what + " op table");
    if (table->struct_size < sizeof(table_type)) {
        return make_error(prefix(label) + what + " op table is " + std::to_string(table->struct_size) +
                          " bytes, expected at least " + std::to_string(sizeof(table_type)));
    }
    for (const auto& [name, present] : fns) {
        if (!present) return make_error(prefix(label) + what + " op table lacks " + name);
    }
    return status::success();
}

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
    if (d->struct_size < sizeof(troupe_plugin_descriptor)) {
        return make_error(prefix(label) + "descriptor is " + std::to_string(d->struct_size) + " bytes, ABI version " +
                          std::to_string(d->abi_version) + " needs at least " +
                          std::to_string(sizeof(troupe_plugin_descriptor)));
    }
    if (d->kind != to_c_kind(expected)) {
        std::string found = "unknown kind " + std::to_string(d->kind);
        for (plugin_kind k : {plugin_kind::attention, plugin_kind::quant, plugin_kind::spec}) {
            if (to_c_kind(k) == d->kind) found = std::string(plugin_kind_name(k));
        }
        const char* article = found == "attention" ? "an " : "a ";
        return make_error(prefix(label) + path + " is " + article + found + " plugin, expected " +
                          std::string(plugin_kind_name(expected)));
    }
    if (d->name == nullptr || d->create == nullptr || d->destroy == nullptr || d->error_message == nullptr) {
        return make_error(prefix(label) + "descriptor lacks one of name, create, destroy, error_message");
    }
    switch (expected) {
        case plugin_kind::attention:
            return check_table(label, "attention", d->attention, {{"forward", d->attention && d->attention->forward}});
        case plugin_kind::quant:
            return check_table(label, "quant", d->quant,
                               {{"claims", d->quant && d->quant->claims},
                                {"prepare", d->quant && d->quant->prepare},
                                {"matmul", d->quant && d->quant->matmul},
                                {"release", d->quant && d->quant->release}});
        case plugin_kind::spec:
            return check_table(label, "spec", d->spec, {{"propose", d->spec && d->spec->propose}});
    }
    TROUPE_ASSERT(false, "plugin_kind out of range");
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

int32_t plugin_library::score(plugin_backend backend) const {
    if (desc_->score == nullptr) return backend == plugin_backend::cpu ? 0 : -1;
    return desc_->score(to_c_backend(backend));
}

}  // namespace troupe
