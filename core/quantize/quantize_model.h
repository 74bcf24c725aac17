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

// progress(done, n_groups, group) after each group.
using group_progress_fn = std::function<void(int32_t, int32_t, const planned_group&)>;

// The layers of the plan's groups in plan order (0, 1, ..., then -1 for the output matrix).
std::vector<int32_t> plan_layers(const quantize_plan& plan);
// Quantizes one layer's groups (-1: the output matrix) into `out`: the method's in plan order, each folding its
// scales, then the layer's F16 groups (every fold lands within the layer). `done` counts groups for progress.
status quantize_layer(f32_model& model, const quantize_plan& plan, int32_t layer, quantize_method& method,
                      const parallel_for_fn& parallel_for, quantized_tensors& out, const group_progress_fn& progress,
                      int32_t& done);
// Replaces the layer's linears in the float32 copies by what their written rows dequantize to, so that later
// calibration passes see the layer as the written model computes it (sequential calibration).
void use_quantized_weights(f32_model& model, const quantize_plan& plan, int32_t layer, const quantized_tensors& q);
// Every layer's groups, in plan order.
result<quantized_tensors> quantize_groups(f32_model& model, const quantize_plan& plan, quantize_method& method,
                                          const parallel_for_fn& parallel_for, const group_progress_fn& progress);

// llama.cpp's general.file_type of a model mostly of `type` (troupe's own types: their id).
uint32_t gguf_file_type(ggml_type type);

status write_quantized_gguf(const f32_model& model, const quantize_plan& plan, const quantized_tensors& tensors,
                            const std::string& method, const std::string& path);

}  // namespace troupe
