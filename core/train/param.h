// param: one trainable tensor of core/train, its value and its gradient side by side.
//
// Values are row-major float32 ([rows, cols] for a matrix: a GGUF tensor of ggml dims [cols, rows]). Backward
// passes ACCUMULATE into grad (grad += ...), so branches that share an input add up without copies; the training
// loop zeroes the gradients before each step (zero_grads).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.h"

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

// The elementwise passes over every parameter (zeroing, the norm, the optimizer's update) run over chunks of at most
// param_chunk elements, split over the pool's threads when one is given; the norm sums its chunks' partial sums in
// chunk order, so it does not depend on the thread count.
constexpr int64_t param_chunk = int64_t{1} << 16;
// f(k, begin, end, chunk) for elements [begin, end) of params[k], every chunk (numbered in order) of every parameter,
// in parallel over the chunks.
void for_param_chunks(std::span<param* const> params, cpu::thread_pool* pool,
                      const std::function<void(size_t, int64_t, int64_t, int64_t)>& f);

void zero_grads(std::span<param* const> params, cpu::thread_pool* pool = nullptr);
// sqrt(sum of every gradient element squared).
double grad_norm(std::span<param* const> params, cpu::thread_pool* pool = nullptr);

}  // namespace troupe::train
