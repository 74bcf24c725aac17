// arch_description: what sets one model architecture apart in troupe's one graph (core/model/cpu_llama.h).
//
// Every architecture troupe runs is the same pre-norm transformer; a description names the differences:
//
//   x = embed(tokens) [· sqrt(dim) when embed_scale_sqrt_dim]
//   per layer:  h = rmsnorm(x) · attn_norm
//               attention block: standard  q, k, v = h·Wq + bq, h·Wk + bk, h·Wv + bv    (fused_qkv: one attn_qkv)
//                                          RoPE (rope: normal | neox); attention with the layer's window and
//                                          soft-capping; a = attn·Wo
//                                mla       (core/model/mla_block.h)
//               x += post_norms ? rmsnorm(a) · post_attention_norm : a
//               h = rmsnorm(x) · ffn_norm
//               FFN block:       dense     act(h·W_gate) ⊙ h·W_up, ·W_down  (act: silu | gelu_tanh;
//                                                                              fused_gate_up: one ffn_up, gate first)
//                                moe       (core/model/moe_ffn.h), layers >= leading dense ones
//               x += post_norms ? rmsnorm(f) · post_ffw_norm : f
//   logits = rmsnorm(x) · output_norm · W_out   (output.weight, or token_embd when the file has none: tied)
//            [final soft-capping when the file sets <arch>.final_logit_softcapping]
//
// Hyper-parameters come from the architecture's own GGUF keys ("<arch>.*": llama_hparams.cpp); the tensors a
// description implies are bound, with their shapes, by llama_weights.cpp. The descriptions live one family per
// file beside this one and are looked up by general.architecture in the registry (arch_registry.h).
#pragma once

#include <string_view>

namespace troupe {

enum class rope_mode { normal, neox };  // normal: rotate adjacent pairs (x0,x1); neox: halves (x_i, x_{i+d/2})

// The activation of the gate in a dense FFN: SwiGLU (silu) or GeGLU (GELU, tanh approximation).
enum class ffn_activation { silu, gelu_tanh };

// Which layers attend within <arch>.attention.sliding_window (when the file sets it): every layer (Mistral v0.1,
// Phi-3), the even layers (Gemma 2: 0, 2, ...; the odd ones are global), or none (the key is ignored).
//
// KV blocks (kv.window_release, core/model/kv_groups.h): the layers form KV groups by their window (global, windowed),
// each with its own block table per sequence from one pool; the KV allocator (actors/kv_allocator/kv_group_pool.h)
// gives a windowed group's blocks back once every position in them is <= p - window for the sequence's next query p
// (attention/gqa reads no block before a token's window and refuses a -1 inside it). Gemma 2: a global and a windowed
// group of 13 layers each sharing memory slots; Mistral v0.1: one windowed group.
enum class window_layers { none, all, even };

// The attention block of a layer (standard q/k/v heads, or DeepSeek-V2's multi-head latent attention) and its FFN
// block (dense, or mixture of experts).
enum class attention_block { standard, mla };
enum class ffn_block { dense, moe };

struct arch_description {
    std::string_view name;  // general.architecture
    rope_mode rope = rope_mode::normal;
    ffn_activation activation = ffn_activation::silu;
    bool qkv_bias = false;              // attn_{q,k,v}.bias, F32
    bool fused_qkv = false;             // attn_qkv.weight: q rows, then k rows, then v rows
    bool fused_gate_up = false;         // ffn_up.weight of 2 * ffn rows: the gate's, then the up projection's
    bool post_norms = false;            // post_attention_norm / post_ffw_norm on each branch before the residual add
    bool embed_scale_sqrt_dim = false;  // embeddings multiplied by sqrt(dim) (Gemma)
    window_layers window = window_layers::none;
    attention_block attention = attention_block::standard;
    // MoE layers: the file's expert keys ("<arch>.expert_count" > 0) decide; experts_required marks an
    // architecture whose layers past the leading dense ones are always experts (DeepSeek-V2).
    bool experts_required = false;
};

}  // namespace troupe
