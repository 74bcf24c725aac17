// The seams between the model graph and the parts that plugins provide: attention over the KV cache,
// and matrix products with quantized weights. The plugin host adapts plugin op tables (C ABI,
// plugins/include/troupe/plugin.h) to these C++ interfaces; tests may implement them directly.
//
// KV cache layout (owned by the attention op, memory owned by the executor), one pool per layer:
//
//   k_pool, v_pool: [n_blocks, block_size, n_kv_heads, head_dim] float32
//
//   sequence s, position p  ->  block block_tables[s][p / block_size], row p % block_size
//
// A contiguous per-sequence cache is the special case of one block of n_ctx tokens per sequence;
// the paged allocator hands out many small blocks through the same tables.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/result.h"
#include "kernels/ggml_types.h"

namespace troupe {

struct compute_context;  // core/model/compute_context.h

// Runs fn(begin, end) over [0, n) split across the executor's worker threads; returns when all are done.
using parallel_for_fn = std::function<void(int64_t n, const std::function<void(int64_t, int64_t)>& fn)>;

// Element type of the KV pools (kv.dtype).
enum class kv_dtype {
    f32,  // float
    f16,  // IEEE half (uint16_t storage): half the memory and the bytes attention reads
};

inline size_t kv_element_bytes(kv_dtype t) {
    return t == kv_dtype::f16 ? 2 : 4;
}

struct attention_call {
    int32_t n_tokens;    // tokens in this step, all sequences together
    int32_t n_heads;     // query heads
    int32_t n_kv_heads;  // key/value heads; n_heads % n_kv_heads == 0 (GQA group = n_heads / n_kv_heads)
    int32_t head_dim;
    float scale;  // usually 1 / sqrt(head_dim)

    const float* q;  // [n_tokens, n_heads, head_dim], RoPE applied
    const float* k;  // [n_tokens, n_kv_heads, head_dim], RoPE applied; written into the cache at its position
    const float* v;  // [n_tokens, n_kv_heads, head_dim]
    float* out;      // [n_tokens, n_heads, head_dim]

    const int32_t* positions;  // [n_tokens] position of each token in its sequence
    const int32_t* seq_of;     // [n_tokens] index into block_tables of each token's sequence

    int32_t n_seqs;
    const int32_t* const* block_tables;  // [n_seqs][n_blocks_of_seq]
    int32_t block_size;                  // tokens per block
    float* k_pool;                       // this layer's pools, layout above, elements of kv_type
    float* v_pool;                       // (for f16 the pointers hold uint16_t halves)
    kv_dtype kv_type = kv_dtype::f32;

    // Causal: a token at position p attends to positions 0..p of its own sequence, which are the
    // cache rows written earlier plus the rows this call writes for tokens of this step.
    //
    // Tree attention (speculative verification, only for ops with supports_trees()): with rows set, token t writes
    // its k and v at cache row rows[t] (positions[t] is only its RoPE position, already applied) and attends to the
    // rows r of its sequence with r < mask_base[t], or r = mask_base[t] + 64 * w + j where bit j of
    // mask[t * mask_words + w] is set (its ancestors in the tree and itself).
    const int32_t* rows = nullptr;       // [n_tokens] or null
    const int32_t* mask_base = nullptr;  // [n_tokens]
    const uint64_t* mask = nullptr;      // [n_tokens, mask_words]
    int32_t mask_words = 0;

    // Architectures beyond Llama (plugin.h, troupe_attention_call version 4); each used only with an op whose
    // features() has it.
    int32_t layer = 0;
    float softcap = 0.0f;  // scores s -> softcap * tanh(s / softcap) before masking; 0: none (Gemma 2)
    int32_t window = 0;    // attend only to positions > p - window; 0: all (sliding-window layers)
    // MLA (kv_lora_rank > 0): n_kv_heads 1, head_dim = qk_nope + rope_dim; k is the latent [n_tokens, kv_lora_rank +
    // rope_dim] (normed c_kv, then the roped shared key), v and v_pool null, k_pool holds latent rows, out is
    // [n_tokens, n_heads, v_head_dim]. The op expands K and V with blk.<layer>.attn_kv_b.weight.
    int32_t kv_lora_rank = 0;
    int32_t rope_dim = 0;
    int32_t v_head_dim = 0;
};

// Bits of attention_op::features(): the same values as plugin.h's TROUPE_ATTENTION_FEATURE_*.
enum attention_feature : uint32_t {
    attention_softcap = 1u << 0,
    attention_window = 1u << 1,
    attention_mla = 1u << 2,
};

class attention_op {
public:
    virtual ~attention_op() = default;
    virtual std::string name() const = 0;
    virtual status forward(const attention_call& call, const parallel_for_fn& parallel_for) = 0;
    // Whether forward() takes pools of this element type.
    virtual bool supports(kv_dtype t) const { return t == kv_dtype::f32; }
    // Whether forward() takes tree calls (attention_call::rows and mask).
    virtual bool supports_trees() const { return false; }
    // The attention_feature bits forward() honours (softcap, window, MLA).
    virtual uint32_t features() const { return 0; }
};

// A weight matrix as stored: n_out rows of n_in elements of type `type`.
struct weight_view {
    ggml_type type;
    const void* data;
    int64_t n_in;
    int64_t n_out;
    size_t row_stride;  // bytes between rows
};

// A weight the quant op has taken over (possibly re-quantized at load); opaque to the core.
class prepared_weight {
public:
    virtual ~prepared_weight() = default;
    virtual size_t n_bytes() const = 0;  // bytes read per full product (for bandwidth figures)

    // kernels.weights: copy, for ops that let the host place their weights (a quant plugin's troupe_quant_ops
    // version 2): shards must start at multiples of placement_rows() rows (0: the op keeps its own memory), rows
    // [r0, r1) take placed_bytes(r0, r1) there, and place() moves rows [bounds[i], bounds[i + 1]) to dsts[i] (64-byte
    // aligned), read there from then on, with products unchanged bit for bit; the memory must outlive every
    // product. Const: where the bytes live is not what the weight is.
    virtual int64_t placement_rows() const { return 0; }
    virtual size_t placed_bytes(int64_t r0, int64_t r1) const { return 0; }
    virtual status place(std::span<const int64_t> bounds, std::span<uint8_t* const> dsts) const {
        return make_error("this prepared weight cannot be placed by the host (placement_rows() is 0)");
    }
};

class quant_op {
public:
    virtual ~quant_op() = default;
    virtual std::string name() const = 0;
    // Whether this op takes over weights stored as `type` (e.g. Q8_0, or F32/F16 when quantizing online).
    virtual bool claims(ggml_type type) const = 0;
    virtual result<std::shared_ptr<const prepared_weight>> prepare(const weight_view& w) = 0;
    // y[n_tokens, n_out] = x[n_tokens, n_in] * W^T
    virtual status matmul(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                          const parallel_for_fn& parallel_for) = 0;
    // The same on the executor's workers (what the model graph calls): ctx.pool, where set, also lets the op give
    // each thread one contiguous share of the rows (thread_pool::parallel_ranges), what decode's memory-streaming
    // loops want. By default, matmul over ctx.parallel_for (compute_context.cpp).
    virtual status matmul_on(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                             const compute_context& ctx);
    // On a GPU (the CUDA graph): the same product with x and y in device memory, enqueued on `stream` (the calling
    // lane's cudaStream_t), for a weight prepared by an op made for that backend. By default: not supported.
    virtual status matmul_on_stream(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                                    void* stream) {
        (void)w, (void)x, (void)y, (void)n_tokens, (void)stream;
        return make_error(name() + ": no products on a GPU stream");
    }
};

}  // namespace troupe
