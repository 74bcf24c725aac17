// grow_model: `troupe synth --grow-from SOURCE.gguf --shape NAME`: a Llama of a larger shape that computes the
// source's function (grow_layout.h), with seeded noise on the new weights, written as GGUF. Grown from stories260K it
// speaks the stories' language at the cost of a 110M or 1B model, so stories260K and its quantized copies are real
// drafters for it (speculative decoding) and heads can be distilled from it.
//
// Weights: every target weight that holds a source weight is that weight (q rows times the layout's q_scale); every
// other matrix element is new: (noise / sqrt(n)) * z for a matrix with rows of n elements, z approximately standard
// normal, drawn per (seed, tensor, row) as `troupe synth` draws (synth_model.h), so the file depends on the seed and
// the noise only. Scaled by the row length, noise X moves each product by about X times its input's size whatever
// the width (and the new residual channels carry about X^2 of the residual's mean square), so one X perturbs a 110M
// and a 1B growth alike. Norm weights are the source's times the layout's norm_scale (new channels and identity
// layers: norm_scale).
//
// With noise 0 the new weights are zero and the target's logits are the source's up to float rounding (in F32;
// other types round the source's weights too). With noise > 0 the new paths (identity layers, new heads, new FFN
// units, new channels) contribute, so the target is a perturbation of the source whose greedy text agrees with the
// source's less as the noise grows, steeply past 0.4 (the perturbation compounds over the layers). The default, 0.35,
// makes stories260K predict about 4 in 5 of its 110M or 1B growth's greedy tokens, as a good draft model does
// (README: "Growing a target for speculative decoding").
#pragma once

#include <cstdint>
#include <string>

#include "cli/grow_layout.h"
#include "cli/synth_model.h"
#include "core/result.h"

namespace troupe::cli {

inline constexpr float k_default_grow_noise = 0.35f;

struct grow_params {
    synth_shape shape;
    ggml_type type = ggml_type::f16;  // matrices; rows that are not a multiple of its block size fall back to F16
    float noise = k_default_grow_noise;
    uint64_t seed = 1;
    int n_threads = 0;  // 0: all cores
};

struct grow_summary {
    grow_layout layout;
    int64_t n_params = 0;
    size_t n_bytes = 0;  // file size
};

// Reads the Llama at source_path (any type troupe computes with), grows it and writes out_path with the source's
// tokenizer metadata. Errors name the file: not a Llama, a mixture of experts, a shape that cannot hold it.
result<grow_summary> write_grown_model(const grow_params& params, const std::string& source_path,
                                       const std::string& out_path);

}  // namespace troupe::cli
