// quant/awq: offline quantization by AWQ (`troupe quantize --method awq`), activation-aware input scaling with a
// clipping search (awq_search.h).
//
//   observe(tap rows X of a layer)  ->  per (layer, tap), in double: Σ|x| per channel, Σ x_i x_j within blocks of
//       256 channels, and either the whole Σ x xᵀ (inputs of width <= n_samples) or a uniform sample of up to
//       n_samples rows (reservoir sampling, fixed seed: the same text gives the same file)
//   quantize_group(linears sharing that input)  ->  the α with the least output error over the group's weights,
//       then each weight's rows of W·diag(s) written, and s into input_scales for the host to fold
//
// A (layer, tap)'s statistics are released once its group is quantized (the host quantizes every group once).
//
// Parameters:
//   n_grid: 1..100        (default 20) α in {0, 1/n_grid, ..., 1}
//   n_samples: 1..65536   (default 512) calibration rows kept per input for measuring the output error (inputs
//                         no wider than this keep E[x xᵀ] instead)
//   clip: bool            (default true) clipping search per block
#include <troupe/plugin.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "plugins/common/plugin_support.h"
#include "plugins/common/quantize_support.h"
#include "plugins/quant/awq/awq_search.h"

namespace {

using namespace troupe::plugin_support;
using troupe::quant_common::codec;

constexpr const char* source = "quant/awq";

constexpr int64_t k_block = troupe::awq::input_stats::k_block;

struct tap_stats {
    int64_t width = 0;
    int64_t n_rows = 0;
    std::vector<double> sum_abs;     // [width]
    std::vector<double> gram;        // [width, width] Σ x xᵀ (upper triangle) when width <= n_samples, else empty
    std::vector<double> block_gram;  // [width, k_block] Σ x_i x_j, j in i's block of 256 (column j % 256) when
                                     // there is no gram, else empty
    std::vector<float> samples;      // [min(n_rows, n_samples), width] when there is no gram, else empty
    std::mt19937_64 rng{0x5eed};
};

}  // namespace

struct troupe_plugin_instance {
    troupe::awq::search_options options;
    int64_t n_samples = 512;
    std::map<int64_t, tap_stats> stats;  // by quant_common::stats_key(layer, tap)
    std::string error;
};

namespace {

int32_t fail(troupe_plugin_instance* inst, int32_t code, std::string message) {
    inst->error = std::move(message);
    return code;
}

int32_t awq_can_write(troupe_plugin_instance*, uint32_t type, int64_t n_in) {
    return troupe::quant_common::can_write(type, n_in);
}

uint64_t awq_wanted(troupe_plugin_instance*) {
    return troupe::quant_common::k_linear_input_taps;
}

int32_t awq_observe(troupe_plugin_instance* inst, const troupe_tap_data* data) {
    return guarded(inst->error, [&]() -> int32_t {
        bool keep = false;
        if (const int32_t rc = troupe::quant_common::screen_tap(data, keep, inst->error); rc != TROUPE_OK || !keep) {
            return rc;
        }
        tap_stats& s = inst->stats[troupe::quant_common::stats_key(data->layer, data->tap)];
        const int64_t n = data->width;
        if (s.width == 0) {
            s.width = n;
            s.sum_abs.assign(static_cast<size_t>(n), 0.0);
            if (n <= inst->n_samples) {
                s.gram.assign(static_cast<size_t>(n * n), 0.0);
            } else {
                s.block_gram.assign(static_cast<size_t>(n * k_block), 0.0);
            }
        } else if (s.width != n) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, troupe::quant_common::width_changed(data, s.width, n));
        }
        const float* xs = data->data;  // [n_rows, n]
        int32_t rc = TROUPE_OK;
        if (!s.gram.empty()) {
            rc = troupe::quant_common::accumulate_upper_gram(xs, data->n_rows, n, s.gram.data());
        } else {
            const troupe_parallel p = troupe::quant_common::host_parallel();
            rc = run_parallel(&p, n, [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) {
                    const int64_t b0 = i / k_block * k_block, b1 = std::min(n, b0 + k_block);
                    double* bg = s.block_gram.data() + i * k_block - b0;
                    for (int64_t r = 0; r < data->n_rows; ++r) {
                        const float* x = xs + r * n;
                        const double xi = x[i];
                        if (xi == 0.0) continue;
                        for (int64_t j = b0; j < b1; ++j) bg[j] += xi * x[j];
                    }
                }
            });
        }
        if (rc != TROUPE_OK) return fail(inst, TROUPE_ERR_INTERNAL, "observe: the host's parallel_for failed");
        for (int64_t r = 0; r < data->n_rows; ++r) {
            const float* x = xs + r * n;
            for (int64_t i = 0; i < n; ++i) s.sum_abs[i] += std::fabs(static_cast<double>(x[i]));
            if (!s.gram.empty()) continue;
            // Reservoir sampling: row k of the stream is kept with probability n_samples / (k + 1).
            const int64_t k = s.n_rows + r;
            int64_t slot = k;
            if (k >= inst->n_samples) slot = static_cast<int64_t>(s.rng() % static_cast<uint64_t>(k + 1));
            if (slot < inst->n_samples) {
                if (slot == static_cast<int64_t>(s.samples.size()) / n) {
                    s.samples.insert(s.samples.end(), x, x + n);
                } else {
                    std::copy(x, x + n, s.samples.begin() + slot * n);
                }
            }
        }
        s.n_rows += data->n_rows;
        return TROUPE_OK;
    });
}

int32_t awq_quantize_group(troupe_plugin_instance* inst, const troupe_quantize_group* group,
                           const troupe_parallel* parallel) {
    return guarded(inst->error, [&]() -> int32_t {
        if (std::string why = troupe::quant_common::check_group(group); !why.empty())
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, why);
        const std::string label = troupe::quant_common::group_label(group);
        const auto it = inst->stats.find(troupe::quant_common::stats_key(group->layer, group->input_tap));
        if (it == inst->stats.end() || it->second.n_rows == 0)
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "quantize_group: no calibration rows were observed for " + label +
                            " (AWQ needs the inputs of every linear it quantizes)");
        const int64_t n_in = group->n_in;
        if (it->second.width != n_in)
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "quantize_group: " + label + " rows have width " + std::to_string(it->second.width) +
                            ", the group's weights take " + std::to_string(n_in));
        troupe::awq::input_stats stats;
        stats.width = n_in;
        stats.mean_abs.resize(static_cast<size_t>(n_in));
        stats.mean_sq.resize(static_cast<size_t>(n_in));
        const double n_rows = static_cast<double>(it->second.n_rows);
        tap_stats& t = it->second;
        if (!t.gram.empty()) {  // the whole Gram matrix, and its blocks of 256 from it
            stats.gram = std::move(t.gram);
            for (int64_t i = 0; i < n_in; ++i) {
                for (int64_t j = i; j < n_in; ++j) {
                    stats.gram[i * n_in + j] /= n_rows;
                    stats.gram[j * n_in + i] = stats.gram[i * n_in + j];
                }
            }
            stats.block_gram.assign(static_cast<size_t>(n_in * k_block), 0.0);
            for (int64_t i = 0; i < n_in; ++i) {
                const int64_t b0 = i / k_block * k_block, b1 = std::min(n_in, b0 + k_block);
                for (int64_t j = b0; j < b1; ++j) stats.block_gram[i * k_block + j - b0] = stats.gram[i * n_in + j];
            }
        } else {
            stats.block_gram = std::move(t.block_gram);
            for (double& v : stats.block_gram) v /= n_rows;
        }
        for (int64_t i = 0; i < n_in; ++i) {
            stats.mean_abs[i] = t.sum_abs[i] / n_rows;
            stats.mean_sq[i] = stats.block_gram[i * k_block + i % k_block];
        }
        stats.samples = std::move(t.samples);
        inst->stats.erase(it);

        std::vector<troupe::awq::weight_ref> weights;
        for (int32_t i = 0; i < group->n_weights; ++i) {
            const troupe_quantize_weight& w = group->weights[i];
            weights.push_back({w.data, w.n_out, codec::of(w.type)});
        }
        const troupe::awq::parallel_rows rows = [&](int64_t n, const std::function<void(int64_t, int64_t)>& f) {
            return run_parallel(parallel, n, f) == TROUPE_OK;
        };
        double error = 0.0;
        const std::vector<float> s =
            troupe::awq::search_scales(weights, stats, group->input_scales != nullptr, inst->options, rows, &error);
        if (error < 0.0) return fail(inst, TROUPE_ERR_INTERNAL, "quantize_group: the host's parallel_for failed");
        for (int32_t i = 0; i < group->n_weights; ++i) {
            const troupe_quantize_weight& w = group->weights[i];
            const size_t row_bytes = troupe_row_bytes(w.type, n_in);
            if (!rows(w.n_out, [&](int64_t begin, int64_t end) {
                    troupe::awq::quantize_rows(weights[i], stats, s, inst->options, begin, end, w.out, row_bytes);
                }))
                return fail(inst, TROUPE_ERR_INTERNAL, "quantize_group: the host's parallel_for failed");
        }
        if (group->input_scales != nullptr) std::copy(s.begin(), s.end(), group->input_scales);
        host_log::write(
            TROUPE_LOG_LEVEL_DEBUG, source, "%s: output error %.6g (mean over %s)", label.c_str(), error,
            stats.gram.empty()
                ? (std::to_string(stats.samples.size() / static_cast<size_t>(n_in)) + " sampled rows").c_str()
                : "all calibration rows");
        return TROUPE_OK;
    });
}

int32_t awq_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    std::string error;
    *out = nullptr;
    const int32_t rc = guarded(error, [&]() -> int32_t {
        param_reader reader(params);
        troupe::awq::search_options options;
        options.n_grid = static_cast<int>(reader.integer("n_grid", 1, 100, 20));
        const int64_t n_samples = reader.integer("n_samples", 1, 65536, 512);
        options.clip = reader.boolean("clip", true);
        if (const std::string& errors = reader.finish({"n_grid", "n_samples", "clip"}); !errors.empty()) {
            error = errors;
            return TROUPE_ERR_INVALID_PARAMS;
        }
        auto* inst = new troupe_plugin_instance;
        inst->options = options;
        inst->n_samples = n_samples;
        host_log::write(TROUPE_LOG_LEVEL_INFO, source, "n_grid %d, n_samples %lld, clip %s", options.n_grid,
                        static_cast<long long>(n_samples), options.clip ? "on" : "off");
        *out = inst;
        return TROUPE_OK;
    });
    set_create_error(error);
    return rc;
}

void awq_destroy(troupe_plugin_instance* inst) {
    delete inst;
}

const char* awq_error_message(const troupe_plugin_instance* inst) {
    return inst != nullptr ? inst->error.c_str() : create_error_buffer();
}

const troupe_quantize_ops awq_quantize_ops = {
    sizeof(troupe_quantize_ops),
    TROUPE_QUANTIZE_OPS_VERSION,
    awq_can_write,
    awq_quantize_group,
};

const troupe_tap_ops awq_tap_ops = {sizeof(troupe_tap_ops), TROUPE_TAP_OPS_VERSION, awq_wanted, awq_observe,
                                    0 /* rows in host memory */};

const troupe_plugin_descriptor awq_descriptor = {
    sizeof(troupe_plugin_descriptor),
    TROUPE_PLUGIN_DESCRIPTOR_VERSION,
    TROUPE_PLUGIN_ABI_VERSION,
    TROUPE_PLUGIN_KIND_QUANT,
    "awq",
    "1.0.0",
    "offline quantization by AWQ (activation-aware input scales and a clipping search) to Q8_0, Q4_0, Q4_1, "
    "W4_G64, W4_G128, Q4_K",
    nullptr,
    awq_create,
    awq_destroy,
    awq_error_message,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    &awq_quantize_ops,
    &awq_tap_ops,
};

}  // namespace

extern "C" TROUPE_PLUGIN_EXPORT const troupe_plugin_descriptor* troupe_plugin_query(uint32_t, uint32_t,
                                                                                    const troupe_host_services* host) {
    host_log::attach(host);
    return &awq_descriptor;
}
