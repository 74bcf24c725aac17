// quant/gptq: offline quantization by GPTQ (`troupe quantize --method gptq`), calibrated on the inputs of each
// linear.
//
//   observe(tap rows X of a layer)  ->  H += Σ x xᵀ per (layer, tap), in double precision (the upper triangle)
//   quantize_group(linears sharing that input)  ->  H = 2 / n · Σ x xᵀ, dampened and factored once for the
//       group (gptq_solver.h), then each weight's rows split over the host's parallel_for
//
// A (layer, tap)'s statistics are released once its group is quantized (the host quantizes every group once).
// input_scales, when given, are left at 1: GPTQ does not rescale inputs.
//
// Parameters:
//   damp: 0..1          (default 0.01) added to H's diagonal as a fraction of its mean
//   block_size: 1..4096 (default 128) columns per lazy update
//   act_order: bool     (default true) quantize columns by decreasing H_ii (grids from the original weights)
//   clip: bool          (default true) choose each group's grid by a clipping search weighted by H_ii
//
// The defaults are the best measured on stories260K (Q4_0, calibrated on half of text/stories.txt, perplexity on
// the other half: F16 15.78, RTN 18.40, GPTQ plain 18.20, clip 17.27, clip + act_order 16.76).
#include <troupe/plugin.h>

#include <map>
#include <string>
#include <vector>

#include "plugins/common/plugin_support.h"
#include "plugins/common/quantize_support.h"
#include "plugins/quant/gptq/gptq_solver.h"

namespace {

using namespace troupe::plugin_support;
using troupe::quant_common::codec;

constexpr const char* source = "quant/gptq";

struct tap_stats {
    int64_t width = 0;
    int64_t n_rows = 0;
    std::vector<double> xx;  // [width, width] Σ x xᵀ, upper triangle
};

}  // namespace

struct troupe_plugin_instance {
    troupe::gptq::solver_options options;
    std::map<int64_t, tap_stats> stats;  // by quant_common::stats_key(layer, tap)
    std::string error;
};

namespace {

int32_t fail(troupe_plugin_instance* inst, int32_t code, std::string message) {
    inst->error = std::move(message);
    return code;
}

int32_t gptq_can_write(troupe_plugin_instance*, uint32_t type, int64_t n_in) {
    return troupe::quant_common::can_write(type, n_in);
}

uint64_t gptq_wanted(troupe_plugin_instance*) {
    return troupe::quant_common::k_linear_input_taps;
}

int32_t gptq_observe(troupe_plugin_instance* inst, const troupe_tap_data* data) {
    return guarded(inst->error, [&]() -> int32_t {
        if (data == nullptr || data->struct_size < sizeof(troupe_tap_data))
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "observe: tap data is null or too small");
        if (data->tap < 0 || data->tap >= TROUPE_TAP_COUNT ||
            (troupe::quant_common::k_linear_input_taps & TROUPE_TAP_BIT(data->tap)) == 0)
            return TROUPE_OK;
        if (data->backend != TROUPE_BACKEND_CPU)
            return fail(inst, TROUPE_ERR_UNSUPPORTED, "observe: calibration runs on the CPU backend only");
        if (data->n_rows <= 0) return TROUPE_OK;
        if (data->width <= 0 || data->data == nullptr)
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "observe: tap data without rows");
        tap_stats& s = inst->stats[troupe::quant_common::stats_key(data->layer, data->tap)];
        const int64_t n = data->width;
        if (s.width == 0) {
            s.width = n;
            s.xx.assign(static_cast<size_t>(n * n), 0.0);
        } else if (s.width != n) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "observe: layer " + std::to_string(data->layer) + " tap " + troupe_tap_name(data->tap) +
                            " changed width from " + std::to_string(s.width) + " to " + std::to_string(n));
        }
        if (troupe::quant_common::accumulate_upper_gram(data->data, data->n_rows, n, s.xx.data()) != TROUPE_OK)
            return fail(inst, TROUPE_ERR_INTERNAL, "observe: the host's parallel_for failed");
        s.n_rows += data->n_rows;
        return TROUPE_OK;
    });
}

int32_t gptq_quantize_group(troupe_plugin_instance* inst, const troupe_quantize_group* group,
                            const troupe_parallel* parallel) {
    return guarded(inst->error, [&]() -> int32_t {
        if (std::string why = troupe::quant_common::check_group(group); !why.empty())
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, why);
        const std::string label = troupe::quant_common::group_label(group);
        const auto it = inst->stats.find(troupe::quant_common::stats_key(group->layer, group->input_tap));
        if (it == inst->stats.end() || it->second.n_rows == 0)
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "quantize_group: no calibration rows were observed for " + label +
                            " (GPTQ needs the inputs of every linear it quantizes)");
        const int64_t n_in = group->n_in;
        if (it->second.width != n_in)
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "quantize_group: " + label + " rows have width " + std::to_string(it->second.width) +
                            ", the group's weights take " + std::to_string(n_in));
        host_log::write(TROUPE_LOG_LEVEL_DEBUG, source, "%s: H from %lld calibration rows", label.c_str(),
                        static_cast<long long>(it->second.n_rows));
        std::vector<double> h = std::move(it->second.xx);
        const double scale = 2.0 / static_cast<double>(it->second.n_rows);
        inst->stats.erase(it);
        for (double& v : h) v *= scale;
        troupe::gptq::prepared_hessian prepared;
        const troupe::gptq::parallel_rows rows = [&](int64_t n, const std::function<void(int64_t, int64_t)>& f) {
            return run_parallel(parallel, n, f) == TROUPE_OK;
        };
        if (std::string why = troupe::gptq::prepare(std::move(h), n_in, inst->options, rows, &prepared); !why.empty())
            return fail(inst, TROUPE_ERR_INTERNAL, "quantize_group: " + label + ": " + why);
        if (prepared.damp_used != inst->options.damp) {
            host_log::write(TROUPE_LOG_LEVEL_WARN, source, "%s: damping raised to %g to factor the Hessian",
                            label.c_str(), prepared.damp_used);
        }
        for (int32_t i = 0; i < group->n_weights; ++i) {
            const troupe_quantize_weight& w = group->weights[i];
            const codec& c = *codec::of(w.type);
            const size_t row_bytes = troupe_row_bytes(w.type, n_in);
            const int32_t rc = run_parallel(parallel, w.n_out, [&](int64_t begin, int64_t end) {
                troupe::gptq::quantize_rows(c, prepared, inst->options, w.data, begin, end, w.out, row_bytes);
            });
            if (rc != TROUPE_OK) return fail(inst, rc, "quantize_group: the host's parallel_for failed");
        }
        if (group->input_scales != nullptr) {
            for (int64_t i = 0; i < n_in; ++i) group->input_scales[i] = 1.0f;
        }
        return TROUPE_OK;
    });
}

int32_t gptq_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    std::string error;
    *out = nullptr;
    const int32_t rc = guarded(error, [&]() -> int32_t {
        param_reader reader(params);
        troupe::gptq::solver_options options;
        options.damp = reader.number("damp", 0.0, 1.0, 0.01);
        options.block_size = static_cast<int>(reader.integer("block_size", 1, 4096, 128));
        options.act_order = reader.boolean("act_order", true);
        options.clip = reader.boolean("clip", true);
        if (const std::string& errors = reader.finish({"damp", "block_size", "act_order", "clip"}); !errors.empty()) {
            error = errors;
            return TROUPE_ERR_INVALID_PARAMS;
        }
        auto* inst = new troupe_plugin_instance;
        inst->options = options;
        host_log::write(TROUPE_LOG_LEVEL_INFO, source, "damp %g, block_size %d, act_order %s, clip %s", options.damp,
                        options.block_size, options.act_order ? "on" : "off", options.clip ? "on" : "off");
        *out = inst;
        return TROUPE_OK;
    });
    set_create_error(error);
    return rc;
}

void gptq_destroy(troupe_plugin_instance* inst) {
    delete inst;
}

const char* gptq_error_message(const troupe_plugin_instance* inst) {
    return inst != nullptr ? inst->error.c_str() : create_error_buffer();
}

const troupe_quantize_ops gptq_quantize_ops = {
    sizeof(troupe_quantize_ops),
    TROUPE_QUANTIZE_OPS_VERSION,
    gptq_can_write,
    gptq_quantize_group,
};

const troupe_tap_ops gptq_tap_ops = {sizeof(troupe_tap_ops), TROUPE_TAP_OPS_VERSION, gptq_wanted, gptq_observe};

const troupe_plugin_descriptor gptq_descriptor = {
    sizeof(troupe_plugin_descriptor),
    TROUPE_PLUGIN_DESCRIPTOR_VERSION,
    TROUPE_PLUGIN_ABI_VERSION,
    TROUPE_PLUGIN_KIND_QUANT,
    "gptq",
    "1.0.0",
    "offline quantization by GPTQ (Hessian-compensated rounding from calibration inputs) to Q8_0, Q4_0, Q4_1, "
    "W4_G64, W4_G128, Q4_K",
    nullptr,
    gptq_create,
    gptq_destroy,
    gptq_error_message,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    &gptq_quantize_ops,
    &gptq_tap_ops,
};

}  // namespace

extern "C" TROUPE_PLUGIN_EXPORT const troupe_plugin_descriptor* troupe_plugin_query(uint32_t, uint32_t,
                                                                                    const troupe_host_services* host) {
    host_log::attach(host);
    return &gptq_descriptor;
}
