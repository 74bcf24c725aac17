#include "core/quantize/quantize_run.h"

namespace troupe {
namespace {

// Hands the method only one layer's taps (layer -1: output_norm and logits).
class layer_filter final : public tap_sink {
public:
    layer_filter(quantize_method& method, int32_t layer) : method_(method), layer_(layer) {
        const uint64_t final_taps = tap_bit(tap_point::output_norm) | tap_bit(tap_point::logits);
        wanted_ = method.wanted() & (layer < 0 ? final_taps : ~final_taps);
    }
    uint64_t wanted() const override { return wanted_; }
    status observe(const tap_data& d) override { return d.layer == layer_ ? method_.observe(d) : status{}; }

private:
    quantize_method& method_;
    int32_t layer_;
    uint64_t wanted_;
};

}  // namespace

result<quantized_tensors> run_quantization(f32_model& model, const quantize_plan& plan, quantize_method& method,
                                           std::shared_ptr<attention_op> attention, const std::vector<int32_t>& tokens,
                                           const quantize_run_options& options, const parallel_for_fn& parallel_for,
                                           const quantize_progress& progress) {
    const bool calibrates = method.wanted() != 0;
    if (calibrates && !attention) return make_error("calibration needs an attention op");
    if (!calibrates || !options.sequential) {
        if (calibrates) {
            std::shared_ptr<tap_sink> sink(&method, [](tap_sink*) {});  // the caller's method outlives the run
            status st = calibrate(model, attention, sink, tokens, options.calibration, [&](int32_t w, int32_t n) {
                if (progress.window) progress.window(1, 1, w, n);
            });
            if (!st.ok()) return st.err();
        }
        return quantize_groups(model, plan, method, parallel_for, progress.group);
    }
    const std::vector<int32_t> layers = plan_layers(plan);
    const int32_t n_passes = static_cast<int32_t>(layers.size());
    quantized_tensors out;
    int32_t done = 0;
    for (int32_t pass = 0; pass < n_passes; ++pass) {
        const int32_t layer = layers[pass];
        auto sink = std::make_shared<layer_filter>(method, layer);
        if (sink->wanted() != 0) {
            status st = calibrate(model, attention, sink, tokens, options.calibration, [&](int32_t w, int32_t n) {
                if (progress.window) progress.window(pass + 1, n_passes, w, n);
            });
            if (!st.ok()) return st.err();
        }
        if (status st = quantize_layer(model, plan, layer, method, parallel_for, out, progress.group, done); !st.ok()) {
            return st.err();
        }
        use_quantized_weights(model, plan, layer, out);
    }
    return out;
}

}  // namespace troupe
