// grow_layout: where each weight of a source Llama lands in a larger target shape so that the target computes the
// same function (function-preserving widening and deepening, as in Net2Net / bert2BERT), and which target weights are
// new. `troupe synth --grow-from` (grow_model.h) fills the new weights with seeded noise of a chosen scale; with
// noise 0 they are zero and the target's logits equal the source's up to float rounding.
//
// Residual stream, d -> D channels: source channel c is target channel c; channels d..D-1 are new. While every
// weight that writes them (embedding columns, attn_output and ffn_down rows) is zero they stay exactly zero, and an
// RMSNorm over D channels sees the same sum of squares divided by D instead of d:
//     rms_D(x) = sqrt(sum/D + eps_D) = sqrt(d/D) * rms_d(x)      with eps_D = eps_d * d/D
// so norm weights are multiplied by sqrt(d/D) (norm_scale) and the target's eps is eps_d * d/D.
//
// Heads, head_dim hd -> HD = k * hd: source dim e of a head lands at head_dim_of[e]. The rotated dims keep their
// RoPE frequency: source pair p (frequency base^(-2p/rd)) goes to target pair k*p (base^(-2kp/(k*rd)), the same
// number), and the target rotates rd_T = k * rd dims; unrotated source dims follow after rd_T. Scores are divided by
// sqrt(HD) instead of sqrt(hd): source q rows are multiplied by q_scale = sqrt(k).
//
//   one target head (HD = 4 * hd, hd = 8, all rotated):  pair 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15
//                                                        src  0 . . . 1 . . . 2 . .  .  3  .  .  .
//
// GQA: each source kv head j (serving source q heads j*g .. j*g+g-1) is copied into ceil(g / G) target kv heads
// (G = the target's q heads per kv head), each serving up to G of those q heads; the remaining target kv heads and
// q heads are new. A new q head's attn_output columns are new weights, so it contributes nothing at noise 0.
//
// FFN, f -> F hidden units: unit u is unit u; new units' ffn_down columns are new weights.
//
// Layers: source layer i is target layer floor(i * L_T / L_S) (spread over the depth); the others are identity
// layers whose every matrix is new (attn_output and ffn_down zero at noise 0, so x + 0 = x).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/synth_model.h"
#include "core/model/llama_hparams.h"
#include "core/result.h"

namespace troupe::cli {

struct grow_layout {
    llama_hparams source;
    llama_hparams target;               // architecture llama, the source's vocabulary, RoPE base and scaling
    std::vector<int32_t> layer_of;      // [source n_layers] target layer of each source layer
    std::vector<int32_t> source_layer;  // [target n_layers] the source layer placed there, or -1 (identity layer)
    std::vector<int32_t> q_head_of;     // [source n_heads] target q head of each source q head
    std::vector<int32_t> kv_source;     // [target n_kv_heads] source kv head copied there, or -1 (new)
    std::vector<int32_t> head_dim_of;   // [source head_dim] target dim (within a head) of each source dim
    float q_scale = 1.0f;               // sqrt(target head_dim / source head_dim)
    float norm_scale = 1.0f;            // sqrt(source dim / target dim)

    // Target row of source row r of attn_q ([n_heads * head_dim] rows) or column of attn_output.
    int32_t q_index(int32_t r) const;
    int32_t n_identity_layers() const;
};

// Plans the growth of `source` into `shape`. Every reason the shape cannot hold the source (fewer channels, layers,
// heads or FFN units; a head size that is not a multiple of the source's; too few kv heads for the source's GQA
// groups) is reported in one error that starts with `what` (the source's path) and names the shape.
result<grow_layout> plan_growth(const llama_hparams& source, const synth_shape& shape, const std::string& what);

}  // namespace troupe::cli
