// quantize_model: the groups of a quantize_plan quantized by a method, its input scales folded, and the GGUF
// written (`troupe quantize` after calibration).
//
// Each group gets its weights from the f32_model, as they stand after every earlier group's fold (the plan's order
// puts a fold before the weight it changes is quantized), and buffers for the rows of its type. When the group's
// input can absorb scales (plan fold != none) the method gets input_scales, all 1; afterwards the host divides the
// norm weight, or the rows of the preceding linear, by them. Groups the plan writes as F16 are converted by the host
// (kernels/ref) after every fold.
//
// The file: every metadata key of the input, general.quantization_version = 2, general.file_type (llama.cpp's
// ftype of the type; troupe's W4 formats their type id), troupe.quantize.method / .type; tensors in the input's
// order: the planned linears in their types, norms F32 (folded), everything else as it was (token_embd keeps its
// type).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/quantize/f32_model.h"
#include "core/quantize/quantize_method.h"
#include "core/quantize/quantize_plan.h"

namespace troupe {

// Tensor name -> its rows in the planned type.
using quantized_tensors = std::map<std::string, std::vector<uint8_t>>;

// Runs every group in plan order; progress(done, n_groups, group) after each.
result<quantized_tensors> quantize_groups(f32_model& model, const quantize_plan& plan, quantize_method& method,
                                          const parallel_for_fn& parallel_for,
                                          const std::function<void(int32_t, int32_t, const planned_group&)>& progress);

// llama.cpp's general.file_type of a model mostly of `type` (troupe's own types: their id).
uint32_t gguf_file_type(ggml_type type);

status write_quantized_gguf(const f32_model& model, const quantize_plan& plan, const quantized_tensors& tensors,
                            const std::string& method, const std::string& path);

}  // namespace troupe
