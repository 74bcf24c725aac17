// param: one trainable tensor of core/train, its value and its gradient side by side.
//
// Values are row-major float32 ([rows, cols] for a matrix: a GGUF tensor of ggml dims [cols, rows]). Backward
// passes ACCUMULATE into grad (grad += ...), so branches that share an input add up without copies; the training
// loop zeroes the gradients before each step (zero_grads).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace troupe::train {

struct param {
    std::string name;           // the GGUF tensor name it is written as ("medusa.0.fc.weight")
    std::vector<int64_t> dims;  // ggml order: dims[0] = row length
    std::vector<float> value;   // [product of dims]
    std::vector<float> grad;    // [product of dims]

    param() = default;
    param(std::string n, std::vector<int64_t> d);  // zero value and grad
    int64_t size() const { return static_cast<int64_t>(value.size()); }
    float* v() { return value.data(); }
    const float* v() const { return value.data(); }
    float* g() { return grad.data(); }
};

void zero_grads(std::span<param* const> params);
// sqrt(sum of every gradient element squared).
double grad_norm(std::span<param* const> params);

}  // namespace troupe::train
