// What attention/mla reads of the model it serves, through the SDK's model services (tensors.h) only: the MLA shape
// from the "<arch>.*" metadata (DeepSeek-V2's keys, as llama.cpp names them) and every layer's attn_kv_b, the matrix
// that expands the latent c_kv into per-head keys and values, as float32 rows.
//
//   attn_kv_b: [n_heads * (qk_nope + v_dim) rows, kv_lora_rank]     per head h, rows h * (qk_nope + v_dim) + ...
//                 0 .. qk_nope-1             W_UK_h  (key rows:   k_nope_h = W_UK_h c)
//                 qk_nope .. qk_nope+v_dim-1 W_UV_h  (value rows: v_h      = W_UV_h c)
//
// Errors are thrown as spec_common::plugin_error and become create()'s message.
#pragma once

#include <troupe/plugin.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plugins/common/target_model.h"

namespace troupe::mla {

struct mla_shape {
    int32_t n_layers = 0;
    int32_t n_heads = 0;
    int32_t kv_lora_rank = 0;  // R: latent width
    int32_t qk_nope = 0;       // per-head key/query dims without RoPE
    int32_t rope_dim = 0;      // the decoupled RoPE dims (one key shared by all heads)
    int32_t v_dim = 0;         // per-head value dims

    int32_t head_dim() const { return qk_nope + rope_dim; }           // q/k head dim of the MHA view
    int32_t latent_width() const { return kv_lora_rank + rope_dim; }  // one cache row: c_kv, then k_pe
    int32_t kv_b_rows_per_head() const { return qk_nope + v_dim; }
    std::string describe() const;  // "4 heads, kv_lora_rank 64, q/k head 32 + 16 RoPE, v 32, 3 layers"
};

class mla_model {
public:
    // Reads the shape and every layer's attn_kv_b; `label` prefixes errors ("attention/mla").
    static mla_model read(const troupe_model_services& s, const std::string& label);

    const mla_shape& shape() const { return shape_; }
    // Layer il's attn_kv_b: [n_heads * (qk_nope + v_dim), kv_lora_rank] float rows.
    const float* kv_b(int32_t il) const { return kv_b_[static_cast<size_t>(il)].data(); }
    // W_UK_h [qk_nope, kv_lora_rank] and W_UV_h [v_dim, kv_lora_rank] of layer il.
    const float* w_uk(int32_t il, int32_t h) const {
        return kv_b(il) + static_cast<size_t>(h) * shape_.kv_b_rows_per_head() * shape_.kv_lora_rank;
    }
    const float* w_uv(int32_t il, int32_t h) const {
        return w_uk(il, h) + static_cast<size_t>(shape_.qk_nope) * shape_.kv_lora_rank;
    }

private:
    mla_shape shape_;
    std::vector<spec_common::float_matrix> kv_b_;  // [n_layers]
};

}  // namespace troupe::mla
