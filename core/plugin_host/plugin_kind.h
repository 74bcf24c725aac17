// The kinds of plugins and the backends they run on, with their YAML names.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/result.h"

namespace troupe {

enum class plugin_kind { attention, quant, spec, kv };
enum class plugin_backend { cpu, cuda };

std::string_view plugin_kind_name(plugin_kind kind);  // "attention", "quant", "spec", "kv"
// Every kind, in the order of the enum (for loops and messages).
inline constexpr plugin_kind all_plugin_kinds[] = {plugin_kind::attention, plugin_kind::quant, plugin_kind::spec,
                                                   plugin_kind::kv};
result<plugin_kind> parse_plugin_kind(std::string_view name);
int32_t to_c_kind(plugin_kind kind);                           // TROUPE_PLUGIN_KIND_*
std::string_view plugin_backend_name(plugin_backend backend);  // "cpu", "cuda"
int32_t to_c_backend(plugin_backend backend);                  // TROUPE_BACKEND_*

}  // namespace troupe
