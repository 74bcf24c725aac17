#include "core/plugin_host/plugin_kind.h"

#include <troupe/plugin.h>

#include <string>

namespace troupe {

std::string_view plugin_kind_name(plugin_kind kind) {
    switch (kind) {
        case plugin_kind::attention:
            return "attention";
        case plugin_kind::quant:
            return "quant";
        case plugin_kind::spec:
            return "spec";
        case plugin_kind::kv:
            return "kv";
    }
    TROUPE_ASSERT(false, "plugin_kind out of range");
}

result<plugin_kind> parse_plugin_kind(std::string_view name) {
    for (plugin_kind k : all_plugin_kinds) {
        if (plugin_kind_name(k) == name) return k;
    }
    return make_error("unknown plugin kind '" + std::string(name) + "' (valid kinds: attention, quant, spec, kv)");
}

int32_t to_c_kind(plugin_kind kind) {
    switch (kind) {
        case plugin_kind::attention:
            return TROUPE_PLUGIN_KIND_ATTENTION;
        case plugin_kind::quant:
            return TROUPE_PLUGIN_KIND_QUANT;
        case plugin_kind::spec:
            return TROUPE_PLUGIN_KIND_SPEC;
        case plugin_kind::kv:
            return TROUPE_PLUGIN_KIND_KV;
    }
    TROUPE_ASSERT(false, "plugin_kind out of range");
}

std::string_view plugin_backend_name(plugin_backend backend) {
    switch (backend) {
        case plugin_backend::cpu:
            return "cpu";
        case plugin_backend::cuda:
            return "cuda";
    }
    TROUPE_ASSERT(false, "plugin_backend out of range");
}

int32_t to_c_backend(plugin_backend backend) {
    switch (backend) {
        case plugin_backend::cpu:
            return TROUPE_BACKEND_CPU;
        case plugin_backend::cuda:
            return TROUPE_BACKEND_CUDA;
    }
    TROUPE_ASSERT(false, "plugin_backend out of range");
}

}  // namespace troupe
