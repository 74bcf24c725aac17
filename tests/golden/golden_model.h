// Loads a shared model the way `troupe run` does, in one of the setups the golden tests compare (which
// activation recipe the matrix products follow decides which golden a model matches).
#pragma once

#include <memory>
#include <string>

#include "core/config/engine_config.h"
#include "core/model/model_runner.h"
#include "core/tokenizer/tokenizer.h"

namespace troupe::testing {

// Which recipe each weight type's products follow:
//   default_config    : the default config: the builtin kernels (kernels.activations: quantized) take every GGUF type,
//                       quant/w4a16 the 4-bit group types;
//   builtin_quantized : no quant plugin, kernels.activations: quantized and attention/gqa's numerics: ggml
//                       (llama.cpp's recipe for every type);
//   builtin_float     : no quant plugin, kernels.activations: float (float activations for every type);
//   float_recipe      : quant/q8 in float mode for Q8_0 tensors and kernels.activations: float for the rest;
//   int8_recipe       : quant/q8 with activations: int8 (W8A8), kernels.activations: quantized, numerics: ggml.
enum class golden_setup { default_config, builtin_quantized, builtin_float, float_recipe, int8_recipe };

const char* setup_name(golden_setup s);

struct golden_model {
    std::shared_ptr<const tokenizer> tok;
    std::unique_ptr<model_runner> runner;
};

// The default config with the model at `path`, attention/gqa, and the quant plugin and kernels of `setup`.
engine_config golden_config(const std::string& path, golden_setup setup = golden_setup::default_config);

result<golden_model> load_golden_model(const std::string& path, golden_setup setup = golden_setup::default_config);

}  // namespace troupe::testing
