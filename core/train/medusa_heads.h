// medusa_heads: K Medusa heads on the target's normed last hidden state f (spec_design.md, "Medusa heads"):
//
//   head_i(f) = output_i · (f + silu(fc_i · f + b_i))        f: [dim], logits: [n_vocab]
//
// Head i predicts the token i + 2 positions after the feature's (the target's own output predicts i + 1).
// Initialised as the target's own prediction: fc_i = 0, b_i = 0 (the residual branch is silu(0) = 0) and
// output_i = the target's output.weight, so training starts from the target's next-token distribution.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/train/param.h"
#include "kernels/cpu/thread_pool.h"

namespace troupe::train {

struct medusa_head {
    param fc_w;   // [dim, dim]  medusa.<i>.fc.weight
    param fc_b;   // [dim]       medusa.<i>.fc.bias
    param out_w;  // [n_vocab, dim]  medusa.<i>.output.weight
};

// What forward keeps for backward, per head.
struct medusa_cache {
    std::vector<float> a;  // [B, dim] fc · f + b
    std::vector<float> r;  // [B, dim] f + silu(a)
};

class medusa_heads {
public:
    // output_weight: the target's [n_vocab, dim] output matrix.
    medusa_heads(int32_t n_heads, int32_t dim, int32_t n_vocab, std::span<const float> output_weight);

    int32_t n_heads() const { return static_cast<int32_t>(heads_.size()); }
    int32_t dim() const { return dim_; }
    int32_t n_vocab() const { return n_vocab_; }
    medusa_head& head(int32_t i) { return heads_[i]; }
    const medusa_head& head(int32_t i) const { return heads_[i]; }
    std::vector<param*> params();

    // logits [B, n_vocab] of head i for features f [B, dim].
    void forward(int32_t i, const float* f, int64_t batch, float* logits, medusa_cache& cache,
                 cpu::thread_pool& pool) const;
    // Accumulates head i's parameter gradients from dlogits [B, n_vocab]; df [B, dim] += ∂/∂f when not null.
    void backward(int32_t i, const float* f, int64_t batch, const float* dlogits, const medusa_cache& cache, float* df,
                  cpu::thread_pool& pool);

private:
    int32_t dim_, n_vocab_;
    std::vector<medusa_head> heads_;
};

}  // namespace troupe::train
