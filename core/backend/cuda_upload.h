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
#include <string>
#include <vector>

#include "core/backend/cuda_runner_params.h"
#include "core/backend/llama_weights_view.h"
#include "core/result.h"
#include "kernels/cuda/cuda_backend_abi.h"

namespace troupe {

// A matrix a quant plugin took: its prepared weight (device memory the plugin owns) and the backend's callback to it.
// Must outlive the model (the runner keeps it).
struct cuda_external_weight {
    std::shared_ptr<quant_op> op;
    std::shared_ptr<const prepared_weight> weight;
    std::string what;                 // "stories.gguf: layer 3 wq", for its errors
    std::string error;                // the last failure, returned to the backend as its message
    troupe_cuda_external_matrix c{};  // ctx points at this struct
};

struct cuda_upload {
    troupe_cuda_model_desc desc{};
    std::vector<troupe_cuda_layer> layers;                   // [n_layers], desc.layers points here
    std::vector<troupe_cuda_layer_features> layer_features;  // [n_layers] or empty; desc.layer_features points here
    std::vector<troupe_cuda_moe_layer> moe_layers;           // [n_layers] or empty; desc.moe_layers points here
    std::vector<troupe_cuda_mla_layer> mla_layers;           // [n_layers] or empty; desc.mla_layers points here
    std::vector<float> mla_rope_freq, mla_rope_ramp;         // [rope_dim / 2] each where the model has MLA
    std::vector<std::vector<uint8_t>> storage;               // dequantized copies the matrices point into
    std::vector<std::unique_ptr<cuda_external_weight>> externals;  // matrices taken by quant plugins
};

// Whether the CUDA backend takes weights of this type (as is or dequantized on the host).
bool cuda_takes_weight_type(ggml_type type);

// The bytes of a description's routed experts that one token's decode step does not read: (n_experts - n_used) /
// n_experts of every MoE layer's stacked gate, up and down matrices; 0 without experts.
uint64_t unrouted_expert_bytes(const troupe_cuda_model_desc& d);

// Checks the view (check_llama_view) and the weight types, then builds the description. A product matrix whose type
// one of params.quant claims goes to the first that does (prepared there: on the device), as on the CPU; else a type
// the backend does not take is an error naming the matrix, its type and what the backend takes.
result<std::unique_ptr<cuda_upload>> prepare_cuda_upload(const llama_weights_view& view,
                                                         const cuda_runner_params& params);

}  // namespace troupe
