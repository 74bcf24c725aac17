// mla_params: the multi-head latent attention shape of a model (DeepSeek-V2, V2-Lite), read from its architecture's
// GGUF keys, its YaRN RoPE scaling, and the tensors of one MLA layer bound by name.
//
// Keys ("<arch>." prefixed; llama.cpp's names):
//   attention.kv_lora_rank        R, the latent's width (absent: the model has no MLA)
//   attention.q_lora_rank         the query's LoRA rank (absent or 0: attn_q maps the input to the queries directly)
//   attention.key_length          q/k head dim: qk_nope (no RoPE) + rope_dim
//   attention.value_length        v head dim
//   rope.dimension_count          rope_dim, the decoupled RoPE dims (one key of them shared by all heads)
//   attention.head_count, rope.freq_base, attention.layer_norm_rms_epsilon
//   rope.scaling.type = yarn with rope.scaling.factor, rope.scaling.original_context_length,
//   rope.scaling.yarn_log_multiplier (0.1 · DeepSeek's mscale_all_dim, as llama.cpp's converter writes it),
//   rope.scaling.yarn_beta_fast / yarn_beta_slow (default 32 / 1)
//
// YaRN as DeepSeek's reference and llama.cpp compute it: per rotated pair i (0 .. rope_dim / 2), with
// theta_extrap = p · base^(-2i / rope_dim) and theta_interp = theta_extrap / factor,
//   theta = theta_interp · (1 - ramp(i)) + theta_extrap · ramp(i),
//   ramp(i) = 1 - clamp((i - low) / max(0.001, high - low), 0, 1),
//   low  = max(0, floor(corr(beta_fast))), high = min(rope_dim - 1, ceil(corr(beta_slow))),
//   corr(b) = rope_dim · ln(original_context / (2π b)) / (2 ln base);
// cos and sin keep magnitude 1 (DeepSeek-V2's mscale equals its mscale_all_dim), and the attention scale becomes
//   mscale² / sqrt(q/k head dim),   mscale = 1 + yarn_log_multiplier · ln(factor).
//
// Tensors of layer N (ggml dims, row length first; H heads, D = dim):
//   blk.N.attn_q.weight [D, H (qk_nope + rope_dim)]                       without q LoRA
//   blk.N.attn_q_a.weight [D, q_lora_rank], blk.N.attn_q_a_norm.weight [q_lora_rank] F32,
//   blk.N.attn_q_b.weight [q_lora_rank, H (qk_nope + rope_dim)]           with q LoRA
//   blk.N.attn_kv_a_mqa.weight [D, R + rope_dim]     rows 0..R-1 the latent, then the shared RoPE key
//   blk.N.attn_kv_a_norm.weight [R] F32
//   blk.N.attn_kv_b.weight [R, H (qk_nope + v)]     per head qk_nope key rows, then v value rows (read by the
//                                                   attention plugin, bound here for its shape)
//   blk.N.attn_output.weight [H v, D]               (bound by the graph)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/gguf/gguf_file.h"
#include "core/model/ops.h"
#include "core/result.h"

namespace troupe {

struct mla_yarn {
    float factor = 1.0f;           // context extension; 1: no scaling
    int32_t original_context = 0;  // the context the model was trained for before scaling
    float beta_fast = 32.0f;
    float beta_slow = 1.0f;
    float log_multiplier = 0.0f;  // 0.1 · mscale_all_dim
};

struct mla_params {
    int32_t n_heads = 0;
    int32_t q_lora_rank = 0;  // 0: no query LoRA (attn_q)
    int32_t kv_lora_rank = 0;
    int32_t qk_nope = 0;
    int32_t rope_dim = 0;
    int32_t v_dim = 0;
    float rope_base = 10000.0f;
    float rms_eps = 1e-6f;
    std::optional<mla_yarn> yarn;  // where rope.scaling.type is yarn

    int32_t head_dim() const { return qk_nope + rope_dim; }           // q/k head dim
    int32_t latent_width() const { return kv_lora_rank + rope_dim; }  // one cache row
    int32_t q_width() const { return n_heads * head_dim(); }          // [n, q_width] queries
    int32_t out_width() const { return n_heads * v_dim; }             // [n, out_width] attention output
    float attention_scale() const;                                    // 1 / sqrt(head_dim), times mscale² (YaRN)
    // The rotation of pair i (0 .. rope_dim / 2) at position p: its angle (YaRN applied where the model has it),
    // p * rope_freq(i) blended as above by rope_ramp(i) (1 without YaRN: the extrapolated angle alone).
    float rope_angle(int32_t p, int32_t i) const;
    float rope_freq(int32_t i) const;
    float rope_ramp(int32_t i) const;
    // Elements per token of the cache MLA keeps (the latent and the RoPE key) and of the caches of the same model
    // as multi-head attention (keys of head_dim and values of v_dim per head) and as grouped-query attention with
    // n_groups key/value heads.
    int64_t latent_elements_per_token() const { return latent_width(); }
    int64_t mha_elements_per_token() const { return static_cast<int64_t>(n_heads) * (head_dim() + v_dim); }
    int64_t gqa_elements_per_token(int32_t n_groups) const {
        return static_cast<int64_t>(n_groups) * (head_dim() + v_dim);
    }
};

// The model's MLA parameters, or nullopt where "<arch>.attention.kv_lora_rank" is absent. Errors name the file and
// the key, all of them at once.
result<std::optional<mla_params>> read_mla_params(const gguf::gguf_file& f, const std::string& arch);

struct mla_layer_weights {
    weight_view wq;         // [n_heads * head_dim rows, dim]; data null with q LoRA
    weight_view wq_a;       // [q_lora_rank rows, dim]; data null without
    weight_view q_a_norm;   // [q_lora_rank] F32
    weight_view wq_b;       // [n_heads * head_dim rows, q_lora_rank]
    weight_view wkv_a;      // [kv_lora_rank + rope_dim rows, dim]
    weight_view kv_a_norm;  // [kv_lora_rank] F32
    weight_view wkv_b;      // [n_heads * (qk_nope + v_dim) rows, kv_lora_rank]
};

// Binds layer `layer`'s MLA tensors, checked for shape and type; every problem is appended to `errors` as a line
// ("\n  <file>: tensor <name> ...") and the layer is returned with those views empty.
mla_layer_weights bind_mla_layer(const gguf::gguf_file& f, const mla_params& p, int32_t layer, int32_t dim,
                                 std::string& errors);

}  // namespace troupe
