// tiny_llama: a small llama trained as a drafter (the student of `troupe distill --kind draft`), the same graph
// as core/model/cpu_llama.h computes at inference, with its backward:
//
//   x = embed(tokens)                                                      [N, dim]
//   per layer:  x += W_o · attention(RoPE(W_q n), RoPE(W_k n), W_v n),      n = rmsnorm(x) · attn_norm
//               x += W_down · (silu(W_gate m) ⊙ W_up m),                    m = rmsnorm(x) · ffn_norm
//   logits = output · (rmsnorm(x) · output_norm)                           [N, n_vocab]
//
// Rows are whole sequences (bounds), each from position 0. Params carry their GGUF names (token_embd.weight,
// blk.N.attn_q.weight, ...), so the model is written as an ordinary llama file.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model/llama_hparams.h"
#include "core/train/attention.h"
#include "core/train/float_llama.h"
#include "core/train/param.h"
#include "kernels/cpu/thread_pool.h"

namespace troupe::train {

struct tiny_llama_layer {
    param attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
};

class tiny_llama {
public:
    // Random start: matrices 0.02 · N(0, 1) (seeded), norms 1, output layers' W_o and W_down scaled by
    // 1/√(2·n_layers) (GPT-2's residual scaling).
    tiny_llama(const llama_hparams& hp, uint64_t seed);
    // A copy of an existing model (--draft-from).
    explicit tiny_llama(const float_llama& from);

    const llama_hparams& hp() const { return hp_; }
    std::vector<param*> params();
    param token_embd, output_norm, output;
    std::vector<tiny_llama_layer> layers;

    // logits [N, n_vocab] of the rows; activations stay for backward().
    void forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                 const std::vector<int64_t>& bounds, float* logits, cpu::thread_pool& pool);
    void backward(const std::vector<int32_t>& tokens, const std::vector<int64_t>& bounds, const float* dlogits,
                  cpu::thread_pool& pool);

private:
    void make_params();
    llama_hparams hp_;
    struct layer_acts {
        std::vector<float> x;        // [N, dim] input of the layer
        std::vector<float> r1, r2;   // [N] rmsnorm factors
        std::vector<float> n1;       // [N, dim]
        std::vector<float> q, k, v;  // after RoPE for q, k
        attention_cache att;
        std::vector<float> a;              // [N, q_width]
        std::vector<float> x2;             // [N, dim] after attention
        std::vector<float> n2;             // [N, dim]
        std::vector<float> gate, up, mid;  // [N, ffn_dim]
    };
    std::vector<layer_acts> acts_;
    std::vector<float> cs_;     // [N, rope_dims]
    std::vector<float> x_out_;  // [N, dim]
    std::vector<float> r_out_;  // [N]
    std::vector<float> f_;      // [N, dim]
};

}  // namespace troupe::train
