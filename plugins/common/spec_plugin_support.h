// The ABI glue every spec plugin written in C++ repeats (spec/draft, spec/medusa, spec/eagle, spec/ngram,
// spec/lookahead), kept once. Header-only, like plugin_support.h, so each plugin gets its own hidden copy. The plugin
// defines `struct troupe_plugin_instance` with a member `std::string error` (the last failure of an op, what
// error_message(instance) returns) and writes its create body and its ops; this gives:
//
// - create_instance: runs a create() body with *out null until it succeeds, any exception turned into a status, and
//   the message kept for error_message(NULL) on this thread.
// - finish_params: the end of a create()'s parameter reads: unknown keys and all failed reads as one message.
// - instance_op: runs an op body on an instance, its last error cleared first, exceptions caught into it.
// - path_param: a string parameter taken as written (a file's path), empty when absent.
// - batch_args_valid / start_proposal: propose_batch's checks of its arguments and of each request (the token
//   plugins, spec/ngram and spec/lookahead, read the requests' buffers themselves).
// - spec_ops / spec_descriptor: the op table (ops version 2: propose_batch, with or without a version-1 propose) and
//   the descriptor (kind SPEC), with destroy and error_message over the instance.
// - last_layer_taps / is_last_layer_out / cpu_only_score: for the plugins that draft from the target's last-layer
//   features (LAYER_OUT of layer n_layers - 1), which the host taps on the CPU only.
// - TROUPE_SPEC_PLUGIN_ENTRY(descriptor): the exported troupe_plugin_query returning it.
#pragma once

#include <troupe/plugin.h>
#include <troupe/spec.h>
#include <troupe/taps.h>

#include <string>
#include <utility>
#include <vector>

#include "plugins/common/param_lists.h"
#include "plugins/common/plugin_support.h"

namespace troupe::plugin_support {

using create_fn = int32_t (*)(const troupe_plugin_params* params, troupe_plugin_instance** out);
using score_fn = int32_t (*)(int32_t backend);

// body(std::string& error) -> int32_t status: it sets *out itself on success and `error` on failure.
template <class F>
int32_t create_instance(troupe_plugin_instance** out, F&& body) {
    std::string error;
    *out = nullptr;
    const int32_t rc = guarded(error, [&]() -> int32_t { return body(error); });
    set_create_error(error);
    return rc;
}

// After all reads: false with `error` set to every failed read and unknown key (valid_keys: the plugin's own).
inline bool finish_params(param_reader& reader, const std::vector<std::string>& valid_keys, std::string& error) {
    if (const std::string& errors = reader.finish(valid_keys); !errors.empty()) {
        error = errors;
        return false;
    }
    return true;
}

// params.<key> as written (param_reader has no string read: it is taken as the one valid choice of itself, so that
// finish() counts it as read); "" when absent.
inline std::string path_param(param_reader& reader, const troupe_plugin_params* params, const std::string& key) {
    const char* raw = troupe::spec_common::raw_param(params, key);
    return raw != nullptr ? reader.choice(key, {raw}, "") : "";
}

// body() -> int32_t status; a failure's message goes to inst->error.
template <class Instance, class F>
int32_t instance_op(Instance* inst, F&& body) {
    inst->error.clear();
    return guarded(inst->error, std::forward<F>(body));
}

template <class Instance>
void destroy_instance(Instance* inst) {
    delete inst;
}

template <class Instance>
const char* instance_error_message(const Instance* inst) {
    return inst != nullptr ? inst->error.c_str() : create_error_buffer();
}

// propose_batch's arguments: false with `error` set unless n >= 0 with both arrays.
inline bool batch_args_valid(const troupe_spec_request* requests, int32_t n, const troupe_spec_proposal* out,
                             std::string& error) {
    if (n < 0 || (n > 0 && (requests == nullptr || out == nullptr))) {
        error = "propose_batch got " + std::to_string(n) + " requests (must be >= 0, with buffers for them)";
        return false;
    }
    return true;
}

// Request i of a batch: its proposal p starts empty (no nodes, no q rows); false with `error` set when the request's
// tokens or, with capacity, p's tokens and parents have no buffer.
inline bool start_proposal(int32_t i, const troupe_spec_request& r, troupe_spec_proposal& p, std::string& error) {
    p.n_nodes = 0;
    p.has_q = 0;
    if (r.n_tokens < 0 || (r.n_tokens > 0 && r.tokens == nullptr) ||
        (r.max_nodes > 0 && (p.tokens == nullptr || p.parents == nullptr))) {
        error = "propose_batch: request " + std::to_string(i) + " (sequence " + std::to_string(r.seq_id) + ") has " +
                std::to_string(r.n_tokens) + " tokens and capacity " + std::to_string(r.max_nodes) +
                " without the buffers for them";
        return false;
    }
    return true;
}

// The spec op table with a version-1 `propose` beside propose_batch (a plugin that also serves version-1 hosts).
constexpr troupe_spec_ops spec_ops(decltype(troupe_spec_ops::propose) propose, decltype(troupe_spec_ops::begin) begin,
                                   decltype(troupe_spec_ops::accepted) accepted, decltype(troupe_spec_ops::end) end,
                                   decltype(troupe_spec_ops::propose_batch) propose_batch,
                                   decltype(troupe_spec_ops::max_nodes) max_nodes) {
    return troupe_spec_ops{
        sizeof(troupe_spec_ops), TROUPE_SPEC_OPS_VERSION, propose, begin, accepted, end, propose_batch, max_nodes};
}

// The spec op table without the version-1 `propose` (a plugin that drafts per batch, spec.h).
constexpr troupe_spec_ops spec_ops(decltype(troupe_spec_ops::begin) begin, decltype(troupe_spec_ops::accepted) accepted,
                                   decltype(troupe_spec_ops::end) end,
                                   decltype(troupe_spec_ops::propose_batch) propose_batch,
                                   decltype(troupe_spec_ops::max_nodes) max_nodes) {
    return spec_ops(nullptr, begin, accepted, end, propose_batch, max_nodes);
}

struct spec_plugin_info {
    const char* name;         // "medusa": the library is libtroupe_spec_<name>.so
    const char* version;      // the plugin's own version
    const char* description;  // one line
    score_fn score;           // null: CPU only
    create_fn create;
    const troupe_spec_ops* ops;
    const troupe_tap_ops* taps;  // null: none
};

// A spec plugin's descriptor; destroy deletes the instance, error_message reads its `error` (or the create error).
template <class Instance = troupe_plugin_instance>
constexpr troupe_plugin_descriptor spec_descriptor(const spec_plugin_info& info) {
    return troupe_plugin_descriptor{
        sizeof(troupe_plugin_descriptor),
        TROUPE_PLUGIN_DESCRIPTOR_VERSION,
        TROUPE_PLUGIN_ABI_VERSION,
        TROUPE_PLUGIN_KIND_SPEC,
        info.name,
        info.version,
        info.description,
        info.score,
        info.create,
        destroy_instance<Instance>,
        instance_error_message<Instance>,
        nullptr,  // attention
        nullptr,  // quant
        info.ops,
        nullptr,  // kv
        nullptr,  // quantize
        info.taps,
    };
}

// The taps wanted by a plugin that drafts from the target's last-layer features.
inline uint64_t last_layer_out(troupe_plugin_instance*) {
    return TROUPE_TAP_BIT(TROUPE_TAP_LAYER_OUT);
}

// Their tap table: LAYER_OUT wanted, each row given to observe (which keeps those is_last_layer_out accepts).
constexpr troupe_tap_ops last_layer_taps(decltype(troupe_tap_ops::observe) observe) {
    return troupe_tap_ops{sizeof(troupe_tap_ops), TROUPE_TAP_OPS_VERSION, last_layer_out, observe,
                          0};  // rows in host memory
}

// Whether `d` is such a feature row: LAYER_OUT of the last of the target's n_layers layers, on the CPU.
inline bool is_last_layer_out(const troupe_tap_data& d, int32_t n_layers) {
    return d.tap == TROUPE_TAP_LAYER_OUT && d.layer == n_layers - 1 && d.backend == TROUPE_BACKEND_CPU;
}

// Such a plugin runs on the host on the CPU's copy of the features; the CUDA graph gives no taps yet.
inline int32_t cpu_only_score(int32_t backend) {
    return backend == TROUPE_BACKEND_CPU ? 50 : -1;
}

}  // namespace troupe::plugin_support

// Defines the plugin's one exported symbol, troupe_plugin_query (plugin.h): it keeps the host's log callback
// (host_log) and returns `descriptor` whatever ABI range the host asks for (the host reports a mismatch itself).
#define TROUPE_SPEC_PLUGIN_ENTRY(descriptor)                                                      \
    extern "C" TROUPE_PLUGIN_EXPORT const troupe_plugin_descriptor* troupe_plugin_query(          \
        uint32_t /*host_abi_min*/, uint32_t /*host_abi_max*/, const troupe_host_services* host) { \
        troupe::plugin_support::host_log::attach(host);                                           \
        return &(descriptor);                                                                     \
    }
