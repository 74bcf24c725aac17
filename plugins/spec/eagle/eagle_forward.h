// eagle_forward: the EAGLE layer's forward over a batch of rows (spec_design.md, "EAGLE layer"; the same recurrence
// core/train/eagle_layer.h trains), with each sequence's keys and values in the plugin's own cache.
//
// A row takes a token and a feature (the target's pre-norm last-layer state h_j, or the layer's own output g of the
// row before when drafting past the verified context) at a RoPE position:
//
//   x = fc · [embed(token); feature] + b
//   h' = x + W_o · attention(W_q x, W_k x, W_v x)        q, k rotated at the row's position
//   g = h' + W_down · (silu(W_gate n) ⊙ W_up n),         n = rmsnorm(h') · ffn_norm
//   logits = output · (rmsnorm(g) · output_norm)         (the target's output norm and matrix)
//
// The row writes its k, v at cache row `slot` and attends to cache rows [0, n_prefix), the rows in `extra` and its
// own: a context row j (slot j) sees rows 0..j; a draft row sees the context and its ancestors in the draft tree.
//
//   cache of a sequence:  [ context rows 0 .. n-1 | draft rows (this proposal only) ]
//
// Why the plugin owns this cache (not the host's KV pools): it is one layer (a small fraction of the target's KV),
// its draft rows form a tree that lives only during propose_batch, and the model service's pools are made for whole
// GGUF models, not for a single layer fed by the target's features.
#pragma once

#include <troupe/plugin.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "plugins/common/packed_matrix.h"

namespace troupe::eagle {

struct eagle_shape {
    int32_t dim = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn_dim = 0, n_vocab = 0;
    float rms_eps = 1e-5f;
    int32_t rope_dims = 0;
    float rope_base = 10000.0f, rope_scale = 1.0f;  // llama's "normal" RoPE: pairs (2i, 2i + 1)
    int32_t q_width() const { return n_heads * head_dim; }
    int32_t kv_width() const { return n_kv_heads * head_dim; }
};

// The layer's matrices ([out][in], in the plugin's weight format) and its vectors and the target's tables (float32,
// borrowed).
struct eagle_weights {
    spec_common::packed_matrix fc_w;     // [dim, 2 dim]
    spec_common::packed_matrix wq;       // [q_width, dim]
    spec_common::packed_matrix wk;       // [kv_width, dim]
    spec_common::packed_matrix wv;       // [kv_width, dim]
    spec_common::packed_matrix wo;       // [dim, q_width]
    spec_common::packed_matrix w_gate;   // [ffn_dim, dim]
    spec_common::packed_matrix w_up;     // [ffn_dim, dim]
    spec_common::packed_matrix w_down;   // [dim, ffn_dim]
    spec_common::packed_matrix output;   // [n_vocab, dim] the target's
    const float* fc_b = nullptr;         // [dim]
    const float* ffn_norm = nullptr;     // [dim]
    const float* token_embd = nullptr;   // [n_vocab, dim] the target's
    const float* output_norm = nullptr;  // [dim] the target's
    size_t n_bytes() const;              // of the matrices: what one forward reads
};

// The layer's shape from the target's hparams (it reuses them all), from any type with these member names: the
// plugin's target_model, the trainer's hparams.
template <class Hparams>
eagle_shape shape_of(const Hparams& hp) {
    eagle_shape sh;
    sh.dim = hp.dim;
    sh.n_heads = hp.n_heads;
    sh.n_kv_heads = hp.n_kv_heads;
    sh.head_dim = hp.head_dim;
    sh.ffn_dim = hp.ffn_dim;
    sh.n_vocab = hp.n_vocab;
    sh.rms_eps = hp.rms_eps;
    sh.rope_dims = hp.rope_dims;
    sh.rope_base = hp.rope_base;
    sh.rope_scale = hp.rope_scale;
    return sh;
}

// The layer's own weights from any type with the file's member names (the plugin's matrices, the trainer's params):
// matrices through pack(m) -> packed_matrix, vectors borrowed through data(v) -> const float*. The target's tables
// (output, token_embd, output_norm) are left for the caller.
template <class Layer, class Pack, class Data>
eagle_weights layer_weights(const Layer& l, Pack&& pack, Data&& data) {
    eagle_weights w;
    w.fc_w = pack(l.fc_w);
    w.wq = pack(l.wq);
    w.wk = pack(l.wk);
    w.wv = pack(l.wv);
    w.wo = pack(l.wo);
    w.w_gate = pack(l.w_gate);
    w.w_up = pack(l.w_up);
    w.w_down = pack(l.w_down);
    w.fc_b = data(l.fc_b);
    w.ffn_norm = data(l.ffn_norm);
    return w;
}

struct eagle_cache {
    std::vector<float> k, v;  // [capacity, kv_width] rotated keys, values
    int32_t n_rows = 0;       // rows in use
    void reserve_rows(int32_t rows, int32_t kv_width);
};

struct eagle_row {
    int32_t token = 0;
    const float* feature = nullptr;  // [dim]
    int32_t position = 0;
    eagle_cache* cache = nullptr;
    int32_t slot = 0;
    int32_t n_prefix = 0;
    std::vector<int32_t> extra;
    bool want_logits = false;
};

class eagle_forward {
public:
    eagle_forward(const eagle_shape& shape, eagle_weights weights) : s_(shape), w_(std::move(weights)) {}
    const eagle_shape& shape() const { return s_; }
    const eagle_weights& weights() const { return w_; }

    // g [n, dim] for every row, and logits [n_wanted, n_vocab] for the rows with want_logits, in row order. The
    // caches must hold every row's slot (reserve_rows); the rows' k, v are written there.
    int32_t run(const std::vector<eagle_row>& rows, float* g, float* logits, const troupe_parallel* parallel);

private:
    void rope(float* x, int64_t n, int32_t n_heads, const std::vector<eagle_row>& rows) const;
    int32_t attend(const std::vector<eagle_row>& rows, const troupe_parallel* parallel);

    eagle_shape s_;
    eagle_weights w_;
    std::vector<float> in_, x_, q_, k_, v_, a_, h1_, n1_, gate_, up_, f_;  // scratch, [n, width] each
};

}  // namespace troupe::eagle
