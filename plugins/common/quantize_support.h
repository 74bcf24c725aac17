// What the offline quantization methods (plugins/quant/rtn, gptq, awq) share on the plugin side: which types
// they write, the checks of a group the host passes to quantize_group, and the key of calibration statistics.
// Header-only, so each plugin gets its own hidden copy.
#pragma once

#include <troupe/plugin.h>

#include <cstdint>
#include <string>

#include "plugins/common/plugin_support.h"
#include "plugins/common/quant_codec.h"

namespace troupe::quant_common {

// The taps that are the inputs of linears (what the calibrated methods observe).
constexpr uint64_t k_linear_input_taps = TROUPE_TAP_BIT(TROUPE_TAP_ATTN_NORM) | TROUPE_TAP_BIT(TROUPE_TAP_ATTN_OUT) |
                                         TROUPE_TAP_BIT(TROUPE_TAP_FFN_NORM) | TROUPE_TAP_BIT(TROUPE_TAP_FFN_HIDDEN) |
                                         TROUPE_TAP_BIT(TROUPE_TAP_OUTPUT_NORM);

inline std::string type_name(uint32_t type) {
    const troupe_type_layout l = troupe_type_layout_of(type);
    return l.name != nullptr ? std::string(l.name) : "type " + std::to_string(type);
}

// 1 when a codec writes `type` and rows of n_in weights are whole blocks of it.
inline int32_t can_write(uint32_t type, int64_t n_in) {
    const codec* c = codec::of(type);
    return c != nullptr && n_in > 0 && n_in % c->block_size() == 0 ? 1 : 0;
}

// "" when the group is one quantize_group can take, else what is wrong with it.
inline std::string check_group(const troupe_quantize_group* g) {
    if (g == nullptr) return "quantize_group: group is null";
    if (g->struct_size < sizeof(troupe_quantize_group))
        return "quantize_group: group struct_size " + std::to_string(g->struct_size) + " is smaller than version 1's " +
               std::to_string(sizeof(troupe_quantize_group));
    if (g->n_in <= 0) return "quantize_group: n_in must be positive, got " + std::to_string(g->n_in);
    if (g->n_weights <= 0 || g->weights == nullptr)
        return "quantize_group: the group has no weights (n_weights " + std::to_string(g->n_weights) + ")";
    for (int32_t i = 0; i < g->n_weights; ++i) {
        const troupe_quantize_weight& w = g->weights[i];
        const std::string name = w.name != nullptr ? w.name : "weight " + std::to_string(i);
        if (w.struct_size < sizeof(troupe_quantize_weight)) return name + ": struct_size too small";
        if (w.data == nullptr || w.out == nullptr) return name + ": data or out is null";
        if (w.n_out < 0) return name + ": n_out must not be negative, got " + std::to_string(w.n_out);
        const codec* c = codec::of(w.type);
        if (c == nullptr)
            return name + ": cannot write " + type_name(w.type) + " (writes Q8_0, Q4_0, Q4_1, W4_G64, W4_G128, Q4_K)";
        if (g->n_in % c->block_size() != 0)
            return name + ": rows of " + std::to_string(g->n_in) + " weights are not whole blocks of " +
                   type_name(w.type) + " (" + std::to_string(c->block_size()) + " weights)";
    }
    return "";
}

// The name of a group in messages: "layer 3 attn_norm".
inline std::string group_label(const troupe_quantize_group* g) {
    const char* tap = troupe_tap_name(g->input_tap);
    return (g->layer < 0 ? std::string("output") : "layer " + std::to_string(g->layer)) + " " +
           (tap != nullptr ? tap : "tap " + std::to_string(g->input_tap));
}

// The host's general worker pool (troupe_host_services.parallel_for) as a troupe_parallel, for work outside op calls
// that carry their own (accumulating calibration statistics in observe); without one, run_parallel runs inline.
inline troupe_parallel host_parallel() {
    troupe_parallel p{};
    p.struct_size = sizeof p;
    p.version = TROUPE_PARALLEL_VERSION;
    p.backend = TROUPE_BACKEND_CPU;
    const troupe_host_services* host = plugin_support::host_log::services();
    if (host != nullptr && TROUPE_HAS_FIELD(host, troupe_host_services, parallel_for)) {
        p.host_ctx = host->host_ctx;
        p.parallel_for = host->parallel_for;
    }
    return p;
}

// g[i, j] += Σ_r x[r, i] x[r, j] for j >= i (the upper triangle of X^T X), x [n_rows, n], g [n, n] row-major, over
// the host's workers: rows i and n - 1 - i go together so every range has about the same work.
inline int32_t accumulate_upper_gram(const float* x, int64_t n_rows, int64_t n, double* g) {
    auto row = [&](int64_t i) {
        double* gi = g + i * n;
        for (int64_t r = 0; r < n_rows; ++r) {
            const float* xr = x + r * n;
            const double xi = xr[i];
            if (xi == 0.0) continue;
            for (int64_t j = i; j < n; ++j) gi[j] += xi * xr[j];
        }
    };
    const troupe_parallel p = host_parallel();
    return plugin_support::run_parallel(&p, (n + 1) / 2, [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
            row(k);
            if (n - 1 - k != k) row(n - 1 - k);
        }
    });
}

// Screens one observation for observe(): TROUPE_OK with keep set when the rows are a linear's input to accumulate,
// TROUPE_OK with keep false when there is nothing to do (another tap, no rows), else a status with `error` set
// (null or short data, rows without data, a device backend).
inline int32_t screen_tap(const troupe_tap_data* data, bool& keep, std::string& error) {
    keep = false;
    if (data == nullptr || data->struct_size < sizeof(troupe_tap_data)) {
        error = "observe: tap data is null or too small";
        return TROUPE_ERR_INVALID_ARGUMENT;
    }
    if (data->tap < 0 || data->tap >= TROUPE_TAP_COUNT || (k_linear_input_taps & TROUPE_TAP_BIT(data->tap)) == 0) {
        return TROUPE_OK;
    }
    if (data->backend != TROUPE_BACKEND_CPU) {
        error = "observe: calibration runs on the CPU backend only";
        return TROUPE_ERR_UNSUPPORTED;
    }
    if (data->n_rows <= 0) return TROUPE_OK;
    if (data->width <= 0 || data->data == nullptr) {
        error = "observe: tap data without rows";
        return TROUPE_ERR_INVALID_ARGUMENT;
    }
    keep = true;
    return TROUPE_OK;
}

// The message for statistics of (layer, tap) first seen `was` wide now observed `now` wide.
inline std::string width_changed(const troupe_tap_data* data, int64_t was, int64_t now) {
    return "observe: layer " + std::to_string(data->layer) + " tap " + troupe_tap_name(data->tap) +
           " changed width from " + std::to_string(was) + " to " + std::to_string(now);
}

// Calibration statistics are kept per (layer, tap).
inline int64_t stats_key(int32_t layer, int32_t tap) {
    return static_cast<int64_t>(layer) * TROUPE_TAP_COUNT + tap;
}

}  // namespace troupe::quant_common
