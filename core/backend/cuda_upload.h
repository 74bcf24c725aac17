// cuda_upload: the host-side half of loading a model onto the GPU: the backend's C model description
// (cuda_backend_abi.h) built from a llama_weights_view, with the architecture's features (revision 4) where the
// model has any.
//
// F32, F16 and BF16 matrices pass as they are (views into the caller's memory, usually the mapped
// GGUF file). Q8_0, Q4_0, Q4_K and Q6_K matrices are dequantized on the host (kernels/ref, exact) to
// F16 or F32, row by row, into buffers owned here: the GPU computes with them as float matrices,
// the "dequantize, then multiply" recipe (golden/rand10M-greedy-floatact.json). Norm weights become F32.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/backend/cuda_runner_params.h"
#include "core/backend/llama_weights_view.h"
#include "core/result.h"
#include "kernels/cuda/cuda_backend_abi.h"

namespace troupe {

struct cuda_upload {
    troupe_cuda_model_desc desc{};
    std::vector<troupe_cuda_layer> layers;                   // [n_layers], desc.layers points here
    std::vector<troupe_cuda_layer_features> layer_features;  // [n_layers] or empty; desc.layer_features points here
    std::vector<std::vector<uint8_t>> storage;               // dequantized copies the matrices point into
};

// Whether the CUDA backend takes weights of this type (as is or dequantized on the host).
bool cuda_takes_weight_type(ggml_type type);

// Checks the view (check_llama_view) and the weight types, then builds the description.
result<std::unique_ptr<cuda_upload>> prepare_cuda_upload(const llama_weights_view& view,
                                                         const cuda_runner_params& params);

}  // namespace troupe
