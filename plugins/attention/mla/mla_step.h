// One MLA attention call as the two paths (mla_absorbed.h, mla_naive.h) see it, after mla_plugin.cpp checked it:
// the call, the model's expansion matrices, the vector primitives, and which cache rows each token reads.
//
// The latent cache (k_pool; v_pool is unused):
//
//   k_pool: [n_blocks, block_size, kv_lora_rank + rope_dim] of float32 or halves (kv_type)
//           one row per token: c_kv (normalised latent, kv_lora_rank), then k_pe (the RoPE key shared by all heads)
//   sequence s, cache row r  ->  block block_tables[s][r / block_size], row r % block_size
//
// Rows a token reads ("keys" k = 0, 1, ...): its prefix, rows 0..position (or [0, mask_base) in a tree call), then in a
// tree call the rows its mask names (its ancestors and itself), ascending:
//
//   key k < n_prefix -> row k;  key n_prefix + i -> extra[i]
#pragma once

#include <troupe/plugin.h>

#include <cstddef>
#include <cstdint>

#include "mla_model.h"
#include "mla_vec.h"

namespace troupe::mla {

// Mask words a tree call may carry (trees of up to 64 * max_mask_words nodes, as attention/gqa).
constexpr int32_t max_mask_words = 16;
constexpr int32_t max_extra_rows = 64 * max_mask_words;

struct mla_step {
    const troupe_attention_call& call;
    const mla_model& model;
    const vec_ops& vec;

    const mla_shape& shape() const { return model.shape(); }
    bool f16() const { return call.kv_type == TROUPE_KV_F16; }
    size_t element_bytes() const { return f16() ? 2 : 4; }
    int32_t seq_of(int32_t t) const { return call.seq_of[t]; }

    // The cache row token t writes: its position, or rows[t] in a tree call.
    int32_t write_row(int32_t t) const { return call.rows != nullptr ? call.rows[t] : call.positions[t]; }
    // Rows [0, n) token t reads first.
    int32_t n_prefix(int32_t t) const { return call.rows != nullptr ? call.mask_base[t] : call.positions[t] + 1; }
    // The rows past the prefix token t reads (its mask bits), ascending, into extra[max_extra_rows]; returns how many.
    int32_t extra_rows(int32_t t, int32_t* extra) const {
        if (call.rows == nullptr) return 0;
        int32_t n = 0;
        for (int32_t w = 0; w < call.mask_words; ++w) {
            for (uint64_t bits = call.mask[static_cast<size_t>(t) * call.mask_words + w]; bits != 0; bits &= bits - 1)
                extra[n++] = call.mask_base[t] + 64 * w + __builtin_ctzll(bits);
        }
        return n;
    }
    // The cache row of sequence s at row r (kv_lora_rank + rope_dim elements of kv_type).
    const void* latent_row(int32_t s, int32_t r) const {
        const int32_t* table = call.block_tables[s];
        const size_t row = static_cast<size_t>(table[r / call.block_size]) * call.block_size + r % call.block_size;
        return reinterpret_cast<const uint8_t*>(call.k_pool) + row * shape().latent_width() * element_bytes();
    }
    void* latent_row_for_write(int32_t s, int32_t r) const { return const_cast<void*>(latent_row(s, r)); }
};

// A token's keys: the row of key k (k < n_prefix + n_extra).
struct token_keys {
    int32_t n_prefix = 0;
    int32_t n_extra = 0;
    const int32_t* extra = nullptr;

    int32_t count() const { return n_prefix + n_extra; }
    int32_t row(int32_t k) const { return k < n_prefix ? k : extra[k - n_prefix]; }
};

}  // namespace troupe::mla
