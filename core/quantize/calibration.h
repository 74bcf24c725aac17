// calibration: runs a text through a float32 cpu_llama of the model with a tap sink attached (the quantization
// method's), as `troupe quantize` does before it quantizes.
//
// The text's tokens (BOS first) are cut into non-overlapping windows of n_ctx tokens; each window runs from
// position 0 as one sequence in one step (every row's taps at once), its first token replaced by BOS where the
// vocabulary has one (as perplexity windows are), with logits for every row when the sink wants output_norm or
// logits. At most max_tokens tokens are used (whole windows; 0: the whole text).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model/ops.h"
#include "core/model/tap_sink.h"
#include "core/quantize/f32_model.h"
#include "core/result.h"

namespace troupe {

struct calibration_options {
    int32_t n_ctx = 512;
    int64_t max_tokens = 0;  // 0: every whole window of the text
    int32_t n_threads = 0;   // 0: all cores
    int32_t bos = -1;        // the first token of every window; -1: keep the text's
};

// Windows the text's n_tokens give; an error (naming the counts) when not even one.
result<int32_t> calibration_windows(int64_t n_tokens, const calibration_options& options);

// Runs the windows; progress(w, n_windows) after each.
status calibrate(const f32_model& model, std::shared_ptr<attention_op> attention, std::shared_ptr<tap_sink> sink,
                 const std::vector<int32_t>& tokens, const calibration_options& options,
                 const std::function<void(int32_t, int32_t)>& progress);

}  // namespace troupe
