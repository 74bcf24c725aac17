// eagle_layer: the one-layer EAGLE drafter (spec_design.md, "EAGLE layer"), its forward over the rows of whole
// sequences and its backward. The target's hparams are reused; the target's token embeddings, output norm and
// output matrix are frozen inputs.
//
// Rows j = 0 .. n-2 of a sequence t_0 .. t_{n-1} with the target's pre-norm last-layer features h_j:
//   x_j = fc · [embed(t_{j+1}); h_j] + b                         [2·dim] -> [dim]
//   h'_j = x_j + W_o · attention(W_q x_j, W_k x_j, W_v x_j)     RoPE at position j, causal within the sequence
//   g_j = h'_j + W_down · (silu(W_gate n_j) ⊙ W_up n_j),        n_j = rmsnorm(h'_j) · ffn_norm
//   logits_j = output · (rmsnorm(g_j) · output_norm)             (the target's, frozen): its draft of t_{j+2}
// Training: KL(target's logits at j+1 ‖ logits_j) + w · smooth-L1(g_j, h_{j+1}).
//
// Initialisation (see eagle_layer.cpp): fc passes h through ([0 | I]), W_o = W_down = 0, the rest copied from the
// target's last layer, so g_j = h_j at the start: the draft begins as the target's own next-token prediction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/train/attention.h"
#include "core/train/float_llama.h"
#include "core/train/param.h"
#include "kernels/cpu/thread_pool.h"

namespace troupe::train {

struct eagle_batch {
    std::vector<int64_t> bounds;     // [n_segments + 1] row ranges, one sequence each (passes blocks of rows)
    int32_t passes = 1;              // blocks per segment: the draft depths trained together (attention.h)
    std::vector<int32_t> tokens;     // [N] t_{j+1}: the token whose embedding row j takes
    std::vector<int32_t> positions;  // [N] j
    std::vector<float> features;     // [N, dim] h_j
};

class eagle_layer {
public:
    // target: the frozen parts and the last layer (layers_wanted::last suffices).
    explicit eagle_layer(const float_llama& target);
    std::vector<param*> params();
    const llama_hparams& hp() const { return hp_; }

    // g [N, dim] and the draft logits [N, n_vocab] of a batch; the activations stay for backward().
    void forward(const eagle_batch& b, float* g, float* logits, cpu::thread_pool& pool);
    // From dg [N, dim] (the feature loss) and dlogits [N, n_vocab] (the KL): the parameter gradients (accumulated).
    void backward(const eagle_batch& b, const float* dg, const float* dlogits, cpu::thread_pool& pool);

    param fc_w, fc_b, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;

private:
    llama_hparams hp_;
    const float_llama* target_;
    struct acts {
        std::vector<float> in;       // [N, 2·dim] [embed; h]
        std::vector<float> x;        // [N, dim]
        std::vector<float> q, k, v;  // [N, q_width], [N, kv_width] x2 (q, k after RoPE)
        std::vector<float> cs;       // [N, rope_dims] RoPE table
        attention_cache att;
        std::vector<float> a;         // [N, q_width] attention output
        std::vector<float> h1;        // [N, dim] h'
        std::vector<float> r1;        // [N] rmsnorm factors of h'
        std::vector<float> n1;        // [N, dim]
        std::vector<float> gate, up;  // [N, ffn_dim]
        std::vector<float> mid;       // [N, ffn_dim] swiglu
        std::vector<float> g;         // [N, dim]
        std::vector<float> r2;        // [N] rmsnorm factors of g
        std::vector<float> f;         // [N, dim] normed g
    } s_;
};

}  // namespace troupe::train
