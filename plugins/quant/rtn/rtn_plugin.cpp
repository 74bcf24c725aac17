// quant/rtn: offline quantization by round to nearest (`troupe quantize --method rtn`), no calibration.
//
// Each block of a row gets the reference recipe's grid (Q8_0, Q4_0: the largest |w| sets the scale; Q4_1,
// W4_G64, W4_G128: the block's min and max; Q4_K: least-squares scale and min per sub-block of 32) and every weight
// its nearest code: the bytes troupe's reference quantizers write (plugins/common/quant_codec.h). The baseline
// the calibrated methods (quant/gptq, quant/awq) are measured against.
//
// Parameters: none.
#include <troupe/plugin.h>

#include <string>

#include "plugins/common/plugin_support.h"
#include "plugins/common/quantize_support.h"

namespace {

using namespace troupe::plugin_support;
using troupe::quant_common::codec;

constexpr const char* source = "quant/rtn";

}  // namespace

struct troupe_plugin_instance {
    std::string error;
};

namespace {

int32_t rtn_can_write(troupe_plugin_instance*, uint32_t type, int64_t n_in) {
    return troupe::quant_common::can_write(type, n_in);
}

int32_t rtn_quantize_group(troupe_plugin_instance* inst, const troupe_quantize_group* group,
                           const troupe_parallel* parallel) {
    return guarded(inst->error, [&]() -> int32_t {
        if (std::string why = troupe::quant_common::check_group(group); !why.empty()) {
            inst->error = why;
            return TROUPE_ERR_INVALID_ARGUMENT;
        }
        const int64_t n_in = group->n_in;
        for (int32_t i = 0; i < group->n_weights; ++i) {
            const troupe_quantize_weight& w = group->weights[i];
            const codec& c = *codec::of(w.type);
            const size_t row_bytes = troupe_row_bytes(w.type, n_in);
            const int32_t rc = run_parallel(parallel, w.n_out, [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r)
                    c.encode(w.data + r * n_in, static_cast<uint8_t*>(w.out) + static_cast<size_t>(r) * row_bytes,
                             n_in);
            });
            if (rc != TROUPE_OK) {
                inst->error = "quantize_group: the host's parallel_for failed";
                return rc;
            }
        }
        if (group->input_scales != nullptr) {
            for (int64_t i = 0; i < n_in; ++i) group->input_scales[i] = 1.0f;
        }
        return TROUPE_OK;
    });
}

int32_t rtn_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    std::string error;
    *out = nullptr;
    const int32_t rc = guarded(error, [&]() -> int32_t {
        param_reader reader(params);
        if (const std::string& errors = reader.finish({}); !errors.empty()) {
            error = errors;
            return TROUPE_ERR_INVALID_PARAMS;
        }
        *out = new troupe_plugin_instance;
        host_log::write(TROUPE_LOG_LEVEL_DEBUG, source, "round to nearest, no calibration");
        return TROUPE_OK;
    });
    set_create_error(error);
    return rc;
}

void rtn_destroy(troupe_plugin_instance* inst) {
    delete inst;
}

const char* rtn_error_message(const troupe_plugin_instance* inst) {
    return inst != nullptr ? inst->error.c_str() : create_error_buffer();
}

uint64_t rtn_wanted(troupe_plugin_instance*) {
    return 0;
}

int32_t rtn_observe(troupe_plugin_instance*, const troupe_tap_data*) {
    return TROUPE_OK;
}

const troupe_quantize_ops rtn_quantize_ops = {
    sizeof(troupe_quantize_ops),
    TROUPE_QUANTIZE_OPS_VERSION,
    rtn_can_write,
    rtn_quantize_group,
};

const troupe_tap_ops rtn_tap_ops = {sizeof(troupe_tap_ops), TROUPE_TAP_OPS_VERSION, rtn_wanted, rtn_observe,
                                    0 /* rows in host memory */};

const troupe_plugin_descriptor rtn_descriptor = {
    sizeof(troupe_plugin_descriptor),
    TROUPE_PLUGIN_DESCRIPTOR_VERSION,
    TROUPE_PLUGIN_ABI_VERSION,
    TROUPE_PLUGIN_KIND_QUANT,
    "rtn",
    "1.0.0",
    "offline quantization by round to nearest (Q8_0, Q4_0, Q4_1, W4_G64, W4_G128, Q4_K), no calibration",
    nullptr,
    rtn_create,
    rtn_destroy,
    rtn_error_message,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    &rtn_quantize_ops,
    &rtn_tap_ops,
};

}  // namespace

extern "C" TROUPE_PLUGIN_EXPORT const troupe_plugin_descriptor* troupe_plugin_query(uint32_t, uint32_t,
                                                                                    const troupe_host_services* host) {
    host_log::attach(host);
    return &rtn_descriptor;
}
