#include "core/quantize/calibration.h"

#include <algorithm>

#include "core/model/cpu_llama.h"

namespace troupe {

result<int32_t> calibration_windows(int64_t n_tokens, const calibration_options& options) {
    if (options.n_ctx < 2) return make_error("--ctx " + std::to_string(options.n_ctx) + ": must be at least 2");
    int64_t usable = n_tokens;
    if (options.max_tokens > 0) usable = std::min(usable, options.max_tokens);
    const int64_t n = usable / options.n_ctx;
    if (n < 1) {
        return make_error("the calibration text is " + std::to_string(n_tokens) + " tokens" +
                          (options.max_tokens > 0 && options.max_tokens < n_tokens
                               ? " (--calib-tokens " + std::to_string(options.max_tokens) + ")"
                               : std::string()) +
                          ", fewer than one window of --ctx " + std::to_string(options.n_ctx) +
                          ": give a longer text or a smaller --ctx");
    }
    return static_cast<int32_t>(n);
}

status calibrate(const f32_model& model, std::shared_ptr<attention_op> attention, std::shared_ptr<tap_sink> sink,
                 const std::vector<int32_t>& tokens, const calibration_options& options,
                 const std::function<void(int32_t, int32_t)>& progress) {
    auto n_windows = calibration_windows(static_cast<int64_t>(tokens.size()), options);
    if (!n_windows.ok()) return n_windows.err();
    const llama_hparams& hp = model.hparams();
    if (options.n_ctx > hp.n_ctx) {
        return make_error("--ctx " + std::to_string(options.n_ctx) + " exceeds the model's context of " +
                          std::to_string(hp.n_ctx));
    }
    cpu_llama_params params;
    params.attention = std::move(attention);
    params.n_threads = options.n_threads;
    params.kv = kv_geometry{options.n_ctx, 1};  // one window's block
    params.max_seqs = 1;
    params.activations = cpu::activation_recipe::float32;
    params.copy_weights = false;  // the weights are this process's copies, not a file mapping
    const bool logit_rows = (sink->wanted() & (tap_bit(tap_point::output_norm) | tap_bit(tap_point::logits))) != 0;
    params.taps = std::move(sink);
    auto runner = cpu_llama::create(model.weights(), params);
    if (!runner.ok()) return runner.err();
    forward_output out;
    for (int32_t w = 0; w < *n_windows; ++w) {
        const auto first = tokens.begin() + static_cast<int64_t>(w) * options.n_ctx;
        sequence_step step{w, std::vector<int32_t>(first, first + options.n_ctx), 0, {0}, logit_rows};
        if (options.bos >= 0) step.tokens[0] = options.bos;
        if (status st = (*runner)->forward(forward_batch{{step}}, out); !st.ok()) {
            return make_error("calibration window " + std::to_string(w + 1) + ": " + st.message());
        }
        if (progress) progress(w + 1, *n_windows);
    }
    return {};
}

}  // namespace troupe
