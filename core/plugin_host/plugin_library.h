// One plugin shared object, opened with dlopen(RTLD_NOW | RTLD_LOCAL) and negotiated: the entry point
// troupe_plugin_query is called with the host's ABI range and services, and the descriptor it returns
// is checked (ABI version, struct sizes, kind, required functions) before anything else is used.
//
// The library stays open while a shared_ptr to it lives; every instance and prepared weight made from
// it holds one, so dlclose happens after the last object from the plugin is gone.
//
// Refusals are values whose message starts with "plugin <kind>/<name>: " and says what was wrong:
// the path tried for a missing file, the missing entry point, both ABI versions on a mismatch, the
// kind found against the kind expected.
#pragma once

#include <troupe/plugin.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/plugin_host/plugin_kind.h"
#include "core/result.h"

namespace troupe {

// The ABI versions this host speaks.
constexpr uint32_t plugin_host_abi_min = 1;
constexpr uint32_t plugin_host_abi_max = TROUPE_PLUGIN_ABI_VERSION;

// The ABI 2 fields of a descriptor, or null when its struct_size says it does not have them (a version-1 plugin).
const troupe_kv_ops* descriptor_kv_ops(const troupe_plugin_descriptor& d);
const troupe_quantize_ops* descriptor_quantize_ops(const troupe_plugin_descriptor& d);
const troupe_tap_ops* descriptor_tap_ops(const troupe_plugin_descriptor& d);

struct plugin_info {
    plugin_kind kind;
    std::string name;         // from the descriptor: "gqa"
    std::string version;      // the plugin's own version: "1.0.0"
    std::string description;  // one line
    std::string path;         // the file loaded
    uint32_t abi_version;
};

class plugin_library {
public:
    // Opens `path`, negotiates, and checks that the plugin is of kind `expected`. `label` ("spec/ngram")
    // names the plugin in messages.
    static result<std::shared_ptr<plugin_library>> open(const std::string& path, plugin_kind expected,
                                                        const std::string& label);
    ~plugin_library();
    plugin_library(const plugin_library&) = delete;
    plugin_library& operator=(const plugin_library&) = delete;

    const troupe_plugin_descriptor& descriptor() const { return *desc_; }
    // The op tables, null when the plugin has none. The ABI 2 tables (kv, quantize, taps) are also null for a
    // version-1 descriptor, which does not contain those fields. Present tables were checked at open: their
    // required functions are there.
    const troupe_attention_ops* attention_ops() const { return desc_->attention; }
    const troupe_quant_ops* quant_ops() const { return desc_->quant; }
    const troupe_spec_ops* spec_ops() const { return desc_->spec; }
    const troupe_kv_ops* kv_ops() const { return descriptor_kv_ops(*desc_); }
    const troupe_quantize_ops* quantize_ops() const { return descriptor_quantize_ops(*desc_); }
    const troupe_tap_ops* tap_ops() const { return descriptor_tap_ops(*desc_); }
    const plugin_info& info() const { return info_; }
    const std::string& label() const { return label_; }
    // How well the plugin runs on `backend`: negative = cannot. A plugin without a score runs on the CPU only.
    int32_t score(plugin_backend backend) const;

private:
    plugin_library(void* handle, const troupe_plugin_descriptor* desc, plugin_info info, std::string label);

    void* handle_;                          // from dlopen
    const troupe_plugin_descriptor* desc_;  // static data inside the library
    plugin_info info_;
    std::string label_;
};

// The services every plugin receives (log into troupe's log, a parallel_for over std::threads);
// process-wide and never freed, so a plugin may keep the pointer as long as it is loaded.
const troupe_host_services* plugin_host_services();

}  // namespace troupe
