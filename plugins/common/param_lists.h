// Reads of the flat parameters (plugin.h: dotted keys) that plugin_support::param_reader does not give: a string
// value as written (a path), and the length of a list (`topk: [4, 2]` arrives as topk.0, topk.1). Header-only.
#pragma once

#include <troupe/plugin.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace troupe::spec_common {

// The value of `key` as written, or null when absent.
inline const char* raw_param(const troupe_plugin_params* params, const std::string& key) {
    for (size_t i = 0; params != nullptr && i < params->n_items; ++i) {
        if (params->items[i].key != nullptr && key == params->items[i].key) return params->items[i].value;
    }
    return nullptr;
}

// 1 + the largest index i of the keys `key.i` or `key.i.*` (0 when there are none).
inline int32_t list_length(const troupe_plugin_params* params, const std::string& key) {
    int32_t n = 0;
    for (size_t i = 0; params != nullptr && i < params->n_items; ++i) {
        const std::string k = params->items[i].key != nullptr ? params->items[i].key : "";
        if (k.rfind(key + ".", 0) != 0) continue;
        n = std::max(n, std::atoi(k.c_str() + key.size() + 1) + 1);
    }
    return n;
}

}  // namespace troupe::spec_common
