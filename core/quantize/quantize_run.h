// quantize_run: calibration and quantization together, as `troupe quantize` runs them.
//
//   once:        one calibration run over the float32 model hands the method every tap it wants, then every
//                group is quantized (the method sees the original model's activations everywhere);
//   sequential:  layer by layer (GPTQ's usual order): a calibration run hands the method only layer l's taps,
//                computed by a model whose layers 0..l-1 are already the quantized ones (their written rows,
//                dequantized, with their scales folded), then layer l's groups are quantized; the output matrix
//                last. Each layer's taps are observed exactly once; it costs a calibration run per layer.
// A method that wants no taps is not calibrated.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/quantize/calibration.h"
#include "core/quantize/quantize_model.h"

namespace troupe {

struct quantize_run_options {
    calibration_options calibration;
    bool sequential = true;
};

struct quantize_progress {
    // After each calibration window: pass (1-based), passes, window (1-based), windows.
    std::function<void(int32_t, int32_t, int32_t, int32_t)> window;
    group_progress_fn group;
};

result<quantized_tensors> run_quantization(f32_model& model, const quantize_plan& plan, quantize_method& method,
                                           std::shared_ptr<attention_op> attention, const std::vector<int32_t>& tokens,
                                           const quantize_run_options& options, const parallel_for_fn& parallel_for,
                                           const quantize_progress& progress);

}  // namespace troupe
