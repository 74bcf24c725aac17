// What attention/mla reads of the model it serves, through the SDK's model services (tensors.h) only: the MLA shape
// from the "<arch>.*" metadata (DeepSeek-V2's keys, as llama.cpp names them) and every layer's attn_kv_b, the matrix
// that expands the latent c_kv into per-head keys and values, read in the type the file stores it: F32, F16 and BF16
// rows are the file's own memory (no copy; the kernels convert halves in registers, mla_vec.h), and a block format
// (Q8_0, Q4_K, ...) is decoded once at create into an F16 copy (half the bytes of a float copy).
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

#include "mla_vec.h"
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
    mla_model() = default;
    // Moves keep kv_b_'s pointers into owned_ valid (a vector's buffer moves with it); a copy would not.
    mla_model(mla_model&&) = default;
    mla_model& operator=(mla_model&&) = default;
    mla_model(const mla_model&) = delete;
    mla_model& operator=(const mla_model&) = delete;

    // Reads the shape and every layer's attn_kv_b; `label` prefixes errors ("attention/mla").
    static mla_model read(const troupe_model_services& s, const std::string& label);

    const mla_shape& shape() const { return shape_; }
    // The element type of every layer's attn_kv_b rows (the file's F32, F16 or BF16, or F16 for a block format).
    weight_type kv_b_type() const { return kv_b_type_; }
    // Row r of layer il's attn_kv_b: [n_heads * (qk_nope + v_dim), kv_lora_rank] rows of kv_b_type().
    const void* kv_b_row(int32_t il, int64_t r) const {
        return static_cast<const uint8_t*>(kv_b_[static_cast<size_t>(il)]) +
               static_cast<size_t>(r) * shape_.kv_lora_rank * (kv_b_type_ == weight_type::f32 ? 4 : 2);
    }
    // W_UK_h [qk_nope, kv_lora_rank] and W_UV_h [v_dim, kv_lora_rank] of layer il: their first rows.
    const void* w_uk(int32_t il, int32_t h) const {
        return kv_b_row(il, static_cast<int64_t>(h) * shape_.kv_b_rows_per_head());
    }
    const void* w_uv(int32_t il, int32_t h) const {
        return kv_b_row(il, static_cast<int64_t>(h) * shape_.kv_b_rows_per_head() + shape_.qk_nope);
    }
    // Bytes of attn_kv_b the plugin holds itself (0 when it reads the file's memory), and a line for the log:
    // "attn_kv_b F16 as stored (0 bytes held)", "attn_kv_b Q8_0 held as F16 (... MiB)".
    size_t resident_bytes() const { return owned_.size() * sizeof(uint16_t); }
    std::string describe_kv_b() const;

private:
    mla_shape shape_;
    weight_type kv_b_type_ = weight_type::f32;
    std::string stored_type_;        // the file's type name ("F16", "Q8_0", ...)
    std::vector<const void*> kv_b_;  // [n_layers] the rows, in the file or in owned_
    std::vector<uint16_t> owned_;    // [n_layers, rows, kv_lora_rank] F16, when the file's type is a block format
};

}  // namespace troupe::mla
