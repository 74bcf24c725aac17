// quant/gptq: offline quantization by GPTQ (`troupe quantize --method gptq`), calibrated on the inputs of each
// linear.
//
//   observe(tap rows X of a layer)  ->  H += Σ x xᵀ (the upper triangle) and Σ|x| per (layer, tap), in double
//   quantize_group(linears sharing that input)  ->  H = 2 / n · Σ x xᵀ, dampened and factored once per trial for
//       the group (gptq_solver.h), each weight's rows split over the host's parallel_for
//
// With scale_inputs (and when the host can fold input scales) GPTQ runs on W·diag(s) with H' = diag(1/s) H
// diag(1/s), s = E|x|^α normalized as AWQ's, for α in {0, 0.1, ..., 1} on 256 evenly spaced rows of each weight;
// the α with the least output error Σ dᵀ H d (d = Q·diag(1/s) - W) quantizes every row, and s goes to
// input_scales (else they are 1).
//
// A (layer, tap)'s statistics are released once its group is quantized (the host quantizes every group once).
//
// Parameters:
//   damp: 0..1          (default 0.01) added to H's diagonal as a fraction of its mean
//   block_size: 1..4096 (default 128) columns per lazy update
//   act_order: bool     (default true) quantize columns by decreasing H_ii (grids from the original weights)
//   clip: bool          (default true) choose each group's grid by a clipping search weighted by H_ii
//   scale_inputs: bool  (default true) search AWQ-style input scales with GPTQ in the loop (11 trials per group)
//
// The defaults are the best measured on stories260K. Calibrated on half of text/stories.txt, perplexity on the
// other half (context 512, F16 15.78): RTN 18.40, GPTQ plain 18.20, clip 17.27, clip + act_order 16.76. Layer by
// layer calibration on the first half, perplexity on the whole text (context 256, F32 10.90), Q4_0 / Q4_1 /
// W4_G64: RTN 12.64 / 11.69 / 12.89, clip + act_order 11.80 / 11.46 / 11.92, with scale_inputs 11.71 / 11.41 /
// 11.55.
#include <troupe/plugin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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
    std::vector<double> xx;       // [width, width] Σ x xᵀ, upper triangle
    std::vector<double> sum_abs;  // [width] Σ |x|
};

}  // namespace

struct troupe_plugin_instance {
    troupe::gptq::solver_options options;
    bool scale_inputs = false;
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
        bool keep = false;
        if (const int32_t rc = troupe::quant_common::screen_tap(data, keep, inst->error); rc != TROUPE_OK || !keep) {
            return rc;
        }
        tap_stats& s = inst->stats[troupe::quant_common::stats_key(data->layer, data->tap)];
        const int64_t n = data->width;
        if (s.width == 0) {
            s.width = n;
            s.xx.assign(static_cast<size_t>(n * n), 0.0);
            s.sum_abs.assign(static_cast<size_t>(n), 0.0);
        } else if (s.width != n) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, troupe::quant_common::width_changed(data, s.width, n));
        }
        if (troupe::quant_common::accumulate_upper_gram(data->data, data->n_rows, n, s.xx.data()) != TROUPE_OK)
            return fail(inst, TROUPE_ERR_INTERNAL, "observe: the host's parallel_for failed");
        for (int64_t r = 0; r < data->n_rows; ++r) {
            for (int64_t i = 0; i < n; ++i) s.sum_abs[i] += std::fabs(static_cast<double>(data->data[r * n + i]));
        }
        s.n_rows += data->n_rows;
        return TROUPE_OK;
    });
}

constexpr int64_t k_trial_rows = 256;  // rows of each weight an input-scale trial quantizes

// AWQ's input scales: s = max(E|x|, 1e-4 max E|x|)^α, normalized by sqrt(max(s) · min(s)) (all 1 for α = 0 or
// inputs that were always 0).
std::vector<float> awq_scales(const std::vector<double>& mean_abs, double alpha) {
    std::vector<float> s(mean_abs.size(), 1.0f);
    const double largest = *std::max_element(mean_abs.begin(), mean_abs.end());
    if (!(largest > 0.0) || alpha == 0.0) return s;
    std::vector<double> raw(mean_abs.size());
    double lo = 0.0, hi = 0.0;
    for (size_t a = 0; a < raw.size(); ++a) {
        raw[a] = std::pow(std::max(mean_abs[a], 1e-4 * largest), alpha);
        lo = a == 0 ? raw[a] : std::min(lo, raw[a]);
        hi = std::max(hi, raw[a]);
    }
    for (size_t a = 0; a < raw.size(); ++a) s[a] = static_cast<float>(raw[a] / std::sqrt(lo * hi));
    return s;
}

// GPTQ on each weight's W·diag(s) with H' = diag(1/s) H diag(1/s) (its inputs become x / s). trial_rows 0: every
// row, written to the weights' out. Else a trial on trial_rows evenly spaced rows of each weight, into scratch,
// returning the output error Σ dᵀ H d over them (d = Q·diag(1/s) - W, scaled to the whole weight). Negative, with
// the instance's error set, on failure. h: [n_in, n_in] symmetric.
double quantize_scaled(troupe_plugin_instance* inst, const troupe_quantize_group* group, const std::vector<double>& h,
                       const std::vector<float>& s, int64_t trial_rows, const troupe_parallel* parallel) {
    const int64_t n_in = group->n_in;
    const std::string label = troupe::quant_common::group_label(group);
    std::vector<double> hs(h.size());  // [n_in, n_in]
    for (int64_t a = 0; a < n_in; ++a) {
        for (int64_t b = 0; b < n_in; ++b) hs[a * n_in + b] = h[a * n_in + b] / (static_cast<double>(s[a]) * s[b]);
    }
    const troupe::gptq::parallel_rows rows = [&](int64_t n, const std::function<void(int64_t, int64_t)>& f) {
        return run_parallel(parallel, n, f) == TROUPE_OK;
    };
    troupe::gptq::prepared_hessian prepared;
    if (std::string why = troupe::gptq::prepare(std::move(hs), n_in, inst->options, rows, &prepared); !why.empty()) {
        fail(inst, TROUPE_ERR_INTERNAL, "quantize_group: " + label + ": " + why);
        return -1.0;
    }
    if (trial_rows == 0 && prepared.damp_used != inst->options.damp) {
        host_log::write(TROUPE_LOG_LEVEL_WARN, source, "%s: damping raised to %g to factor the Hessian", label.c_str(),
                        prepared.damp_used);
    }
    double total = 0.0;
    for (int32_t i = 0; i < group->n_weights; ++i) {
        const troupe_quantize_weight& w = group->weights[i];
        const codec& c = *codec::of(w.type);
        const size_t row_bytes = troupe_row_bytes(w.type, n_in);
        const int64_t n_used = trial_rows == 0 ? w.n_out : std::min(w.n_out, trial_rows);
        auto source_row = [&](int64_t r) { return w.data + (r * w.n_out / n_used) * n_in; };
        std::vector<float> ws(static_cast<size_t>(n_used * n_in));  // [n_used, n_in] W·diag(s)
        for (int64_t r = 0; r < n_used; ++r) {
            for (int64_t k = 0; k < n_in; ++k) ws[r * n_in + k] = source_row(r)[k] * s[k];
        }
        std::vector<uint8_t> scratch(trial_rows == 0 ? 0 : row_bytes * static_cast<size_t>(n_used));
        void* dst = trial_rows == 0 ? w.out : scratch.data();
        if (run_parallel(parallel, n_used, [&](int64_t begin, int64_t end) {
                troupe::gptq::quantize_rows(c, prepared, inst->options, ws.data(), begin, end, dst, row_bytes);
            }) != TROUPE_OK) {
            fail(inst, TROUPE_ERR_INTERNAL, "quantize_group: the host's parallel_for failed");
            return -1.0;
        }
        if (trial_rows == 0) continue;
        std::vector<double> d(static_cast<size_t>(n_in));  // [n_in]
        std::vector<float> q(static_cast<size_t>(n_in));   // [n_in]
        double sum = 0.0;
        for (int64_t r = 0; r < n_used; ++r) {
            c.decode(scratch.data() + r * row_bytes, q.data(), n_in);
            for (int64_t k = 0; k < n_in; ++k) d[k] = q[k] / s[k] - source_row(r)[k];
            for (int64_t a = 0; a < n_in; ++a) {
                double hd = 0.0;
                for (int64_t b = 0; b < n_in; ++b) hd += h[a * n_in + b] * d[b];
                sum += d[a] * hd;
            }
        }
        total += sum * static_cast<double>(w.n_out) / static_cast<double>(n_used);
    }
    return total;
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
        std::vector<double> h = std::move(it->second.xx);  // [n_in, n_in] upper triangle
        const double n_rows = static_cast<double>(it->second.n_rows);
        std::vector<double> mean_abs = std::move(it->second.sum_abs);  // [n_in]
        inst->stats.erase(it);
        for (double& v : h) v *= 2.0 / n_rows;
        for (double& v : mean_abs) v /= n_rows;
        for (int64_t a = 0; a < n_in; ++a) {
            for (int64_t b = a + 1; b < n_in; ++b) h[b * n_in + a] = h[a * n_in + b];
        }
        std::vector<float> best(static_cast<size_t>(n_in), 1.0f);  // [n_in]
        if (inst->scale_inputs && group->input_scales != nullptr) {
            double best_err = quantize_scaled(inst, group, h, best, k_trial_rows, parallel);
            if (best_err < 0.0) return TROUPE_ERR_INTERNAL;
            for (int k = 1; k <= 10; ++k) {
                const std::vector<float> sc = awq_scales(mean_abs, k / 10.0);
                const double err = quantize_scaled(inst, group, h, sc, k_trial_rows, parallel);
                if (err < 0.0) return TROUPE_ERR_INTERNAL;
                if (err < best_err) {
                    best_err = err;
                    best = sc;
                }
            }
        }
        if (quantize_scaled(inst, group, h, best, 0, parallel) < 0.0) return TROUPE_ERR_INTERNAL;
        if (group->input_scales != nullptr) std::copy(best.begin(), best.end(), group->input_scales);
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
        const bool scale_inputs = reader.boolean("scale_inputs", true);
        if (const std::string& errors = reader.finish({"damp", "block_size", "act_order", "clip", "scale_inputs"});
            !errors.empty()) {
            error = errors;
            return TROUPE_ERR_INVALID_PARAMS;
        }
        auto* inst = new troupe_plugin_instance;
        inst->options = options;
        inst->scale_inputs = scale_inputs;
        host_log::write(TROUPE_LOG_LEVEL_INFO, source, "damp %g, block_size %d, act_order %s, clip %s, scale_inputs %s",
                        options.damp, options.block_size, options.act_order ? "on" : "off", options.clip ? "on" : "off",
                        scale_inputs ? "on" : "off");
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

const troupe_tap_ops gptq_tap_ops = {sizeof(troupe_tap_ops), TROUPE_TAP_OPS_VERSION, gptq_wanted, gptq_observe,
                                     0 /* rows in host memory */};

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
