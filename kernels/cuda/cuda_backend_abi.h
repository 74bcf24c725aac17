/* The C boundary between troupe (core/backend/, compiled without CUDA headers) and the CUDA backend
 * shared object libtroupe_cuda.so (kernels/cuda/). Plain C11, no STL, nothing thrown across.
 *
 * The host dlopens the library and calls its one exported entry point, TROUPE_CUDA_ENTRY_NAME, which
 * returns a static op table. The table starts with its size and ABI version; the host refuses a
 * library whose version differs from the one it was built with, naming both. Structs passed in start
 * with struct_size so either side can grow them by appending fields.
 *
 * Growing the op table: new ops are appended at its end and TROUPE_CUDA_ABI_REVISION goes up; the ABI
 * version stays (it changes only when an existing field changes). The host accepts a table of its ABI
 * version from TROUPE_CUDA_OPS_MIN_SIZE bytes (revision 1) up, and calls an appended op only where
 * TROUPE_CUDA_OPS_HAS says the library's table covers it, else it refuses that one feature clearly.
 *   revision 1: everything up to test_embed
 *   revision 2: model_read_blocks, model_write_blocks (swap preemption)
 *   revision 3: model_copy_rows, and tree attention fields appended to troupe_cuda_batch and
 *               troupe_cuda_attention_args (speculative verification of a tree of drafts in one step)
 *   revision 4: the architecture's features (core/model/arch/arch_description.h) appended to
 *               troupe_cuda_model_desc (q/k/v biases, GeGLU, post norms, embedding scale, query scale,
 *               attention and final soft-capping, per-layer sliding windows) and to
 *               troupe_cuda_attention_args (softcap, window); test_geglu, test_add_bias, test_softcap
 *   revision 5: lanes ordered by the host's events (each actor's lane owns its stream, DESIGN.md): lane_record,
 *               lane_wait, lane_synchronize, event_destroy, context_set_explicit_order, model_forward_fenced
 *   revision 6: plugins in the graph: weights whose products a host callback makes (TROUPE_CUDA_EXTERNAL: a quant
 *               plugin's prepared weight) and taps reported to the host (troupe_cuda_model_desc.tap_*)
 *   revision 7: test_matmul_group (the products of one input together, and a gated FFN's fused GLU)
 *   revision 8: mixture-of-experts FFN layers (troupe_cuda_moe_layer, the moe_* fields of troupe_cuda_model_desc);
 *               test_moe_route
 *   revision 9: measure_copy (the device's copy bandwidth, the limit `troupe bench` prints decode's rate beside)
 *   revision 10: multi-head latent attention (DeepSeek-V2: troupe_cuda_mla_layer, the mla_* fields of
 *               troupe_cuda_model_desc) with its latent KV pools; test_mla_attention
 *
 * Errors: every function that can fail returns NULL on success, else a message owned by the library
 * ("cudaMalloc of 2.0 GiB for the KV pools failed: out of memory"), valid until the next call from
 * the same thread.
 *
 * Objects:
 *   context  one device, N CUDA streams ("lanes": 0 = executor compute, 1 = KV copies, ...), one
 *            cuBLASLt handle and workspace. By default work on a lane waits for work issued earlier on the
 *            other lanes, so lanes never race on shared memory. With context_set_explicit_order (revision 5)
 *            they wait for nothing on their own: the host orders them with events (lane_record / lane_wait),
 *            so a copy lane and the compute lane overlap where their blocks do not meet.
 *   model    a model's weights (the llama graph with the dense families' features: qwen2, phi3, gemma2,
 *            mistral; experts since revision 8, latent attention since revision 10) and its KV pools on
 *            the context's device; forward() runs a whole step on lane 0 and copies the requested logits
 *            rows back to the host.
 *
 * Weights arrive as F32, F16 or BF16 matrices in host memory (quantized GGUF types are dequantized by
 * the host before upload in this first cut); norm weights as F32 vectors. Matrix products go through
 * cuBLASLt: F32 weights with F32 compute (TF32 off), F16/BF16 weights with the activations rounded to
 * the same type and F32 accumulation.
 *
 * KV pools (one K and one V pool per layer), as in core/model/ops.h:
 *
 *   [n_blocks, block_size, n_kv_heads, head_dim]   float32 or float16 (kv_type)
 *
 * or, with latent attention (revision 10), one pool per layer of [n_blocks, block_size, kv_lora_rank + rope_dim].
 *   sequence s, position p -> block block_tables[block_table_offsets[s] + p / block_size], row p % block_size
 */
#ifndef TROUPE_CUDA_BACKEND_ABI_H
#define TROUPE_CUDA_BACKEND_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TROUPE_CUDA_ABI_VERSION 1u
#define TROUPE_CUDA_ABI_REVISION 10u
#define TROUPE_CUDA_LIBRARY_NAME "libtroupe_cuda.so"
#define TROUPE_CUDA_ENTRY_NAME "troupe_cuda_backend"

/* Element types, numbered as ggml_type (kernels/ggml_types.h). */
#define TROUPE_CUDA_F32 0u
#define TROUPE_CUDA_F16 1u
#define TROUPE_CUDA_BF16 30u
/* Revision 6: a matrix whose products the host makes (data points at a troupe_cuda_external_matrix). */
#define TROUPE_CUDA_EXTERNAL 0xFFFFu

typedef struct troupe_cuda_context troupe_cuda_context;
typedef struct troupe_cuda_model troupe_cuda_model;
typedef struct troupe_cuda_event troupe_cuda_event; /* revision 5: a point in a lane, owned by the host */

/* Revision 5: model_forward_fenced calls this on the calling thread once the step's KV writes are enqueued (before
 * the output head and the wait for the logits), handing over `kv_done`, an event after them; the host owns it from
 * then on (event_destroy). */
typedef void (*troupe_cuda_fence_fn)(void* arg, troupe_cuda_event* kv_done);

typedef struct troupe_cuda_device_info {
    uint32_t struct_size;
    int32_t index;
    char name[256];
    uint64_t total_bytes;
    uint64_t free_bytes;
    int32_t cc_major; /* compute capability, e.g. 9.0 for H100/H200 */
    int32_t cc_minor;
    int32_t n_sms;
} troupe_cuda_device_info;

/* A matrix in host memory: n_out rows of n_in elements of `type`, row_stride bytes apart.
 * A vector (norm weight) is one row: n_out == 1. */
typedef struct troupe_cuda_matrix {
    uint32_t type; /* TROUPE_CUDA_F32 / F16 / BF16 */
    const void* data;
    int64_t n_in;
    int64_t n_out;
    size_t row_stride;
} troupe_cuda_matrix;

/* Revision 6: a weight the host multiplies through a callback: a quant plugin's prepared weight (its device bytes
 * in the plugin's own layout, plugins/include/troupe/plugin.h troupe_quant_ops). Read by value at model_create; ctx
 * must stay valid while the model lives. matmul enqueues y[n_tokens, n_out] = x[n_tokens, n_in] W^T on `stream` (lane
 * 0's cudaStream_t; x and y device memory) and returns NULL or a message. Only a product matrix may be external (not
 * token_embd, which the graph reads rows of, nor a norm or bias). */
typedef struct troupe_cuda_external_matrix {
    uint32_t struct_size;
    const char* (*matmul)(void* ctx, const float* x, float* y, int32_t n_tokens, void* stream);
    void* ctx;
    uint64_t device_bytes; /* the weight's device memory, counted in model_info's weight_bytes */
} troupe_cuda_external_matrix;

/* Revision 6: one tap of a step (ids, names and shapes: plugins/include/troupe/taps.h), after the graph computed it on
 * lane 0. Valid during the call only. */
typedef struct troupe_cuda_tap {
    uint32_t struct_size;
    int32_t tap;   /* troupe_tap */
    int32_t layer; /* 0-based; -1 for output_norm and logits */
    int64_t n_rows;
    int64_t width;
    const float* device_data; /* [n_rows, width] device memory; work on it goes on `stream` */
    const float* host_data; /* the same rows copied to host memory (waited for) where tap_host has the tap, else null */
    void* stream;           /* lane 0's cudaStream_t */
    const int32_t* rows;    /* host: [n_rows] the batch index of each row's token (output_norm, logits: the out_tokens),
                               null: row i is token i */
} troupe_cuda_tap;

typedef const char* (*troupe_cuda_tap_fn)(void* ctx, const troupe_cuda_tap* tap);

typedef struct troupe_cuda_layer {
    troupe_cuda_matrix attn_norm; /* [dim] F32 */
    troupe_cuda_matrix wq;        /* [n_heads * head_dim, dim] */
    troupe_cuda_matrix wk;        /* [n_kv_heads * head_dim, dim] */
    troupe_cuda_matrix wv;        /* [n_kv_heads * head_dim, dim] */
    troupe_cuda_matrix wo;        /* [dim, n_heads * head_dim] */
    troupe_cuda_matrix ffn_norm;  /* [dim] F32 */
    troupe_cuda_matrix w_gate;    /* [ffn_dim, dim] */
    troupe_cuda_matrix w_up;      /* [ffn_dim, dim] */
    troupe_cuda_matrix w_down;    /* [dim, ffn_dim] */
} troupe_cuda_layer;

/* Revision 4: what a layer has beyond llama's. A matrix whose data is null is absent. Biases and norms are
 * F32 vectors (one row: n_out == 1, n_in == width). */
typedef struct troupe_cuda_layer_features {
    troupe_cuda_matrix bq;             /* [n_heads * head_dim], added after the product (qwen2) */
    troupe_cuda_matrix bk;             /* [n_kv_heads * head_dim] */
    troupe_cuda_matrix bv;             /* [n_kv_heads * head_dim] */
    troupe_cuda_matrix post_attn_norm; /* [dim]: x += rmsnorm(attn out) * post_attn_norm (gemma2) */
    troupe_cuda_matrix post_ffn_norm;  /* [dim]: x += rmsnorm(ffn out) * post_ffn_norm */
    int32_t window;                    /* attends to positions > p - window; 0: the whole causal past */
} troupe_cuda_layer_features;

/* Revision 8: a mixture-of-experts FFN in place of the layer's w_gate, w_up, w_down (core/model/moe_ffn.h):
 *   logits = xn router^T; probs = softmax(logits) (moe_gating 1) or sigmoid(logits) each (2); the n_used experts of
 *   largest probs + probs_bias (largest first, ties to the lower id) with weights probs, divided by their sum where
 *   moe_norm_weights, times moe_weights_scale; y = sum over slots of w * expert(xn), expert e's FFN being rows
 *   [e F, (e + 1) F) of gate_exps and up_exps and rows [e dim, (e + 1) dim) of down_exps (F = moe_expert_ffn), the
 *   layer's activation; y += the shared experts' FFN (moe_shared_ffn units) where the layer has them.
 * Matrices are F32, F16 or BF16 (not external); probs_bias an F32 vector. */
typedef struct troupe_cuda_moe_layer {
    troupe_cuda_matrix router;     /* [n_experts, dim]; data null: the layer's FFN is dense */
    troupe_cuda_matrix gate_exps;  /* [n_experts * expert_ffn, dim] */
    troupe_cuda_matrix up_exps;    /* [n_experts * expert_ffn, dim] */
    troupe_cuda_matrix down_exps;  /* [n_experts * dim, expert_ffn] */
    troupe_cuda_matrix probs_bias; /* [n_experts] or data null */
    troupe_cuda_matrix gate_shexp; /* [shared_ffn, dim] or data null */
    troupe_cuda_matrix up_shexp;   /* [shared_ffn, dim] */
    troupe_cuda_matrix down_shexp; /* [dim, shared_ffn] */
} troupe_cuda_moe_layer;

/* Revision 10: multi-head latent attention (core/model/mla_block.h, DeepSeek-V2 and V2-Lite) in place of the layer's
 * wq, wk, wv (troupe_cuda_layer's wo stays the output matrix, [dim, n_heads * v_dim]). H heads, R = kv_lora_rank:
 *   q  = xn wq^T, or rms_norm(xn wq_a^T) * q_a_norm, then wq_b^T         [n, H, qk_nope + rope_dim]
 *   kv = xn wkv_a^T; kv[:, :R] = rms_norm(kv[:, :R]) * kv_a_norm          [n, R + rope_dim]
 *   RoPE on adjacent pairs of each head's last rope_dim dims of q and of kv's last rope_dim (mla_rope_*)
 *   the latent row kv stored at the token's row of the layer's one pool [n_blocks, block_size, R + rope_dim]
 *   per head: q_lat = W_UK^T q_nope (W_UK: rows h (qk_nope + v_dim) .. + qk_nope of wkv_b), scores
 *   attn_scale * (q_lat . c + q_pe . k_pe) over the rows the token sees, o = W_UV (softmax . c) (W_UV: the next v_dim
 *   rows), [n, H * v_dim]
 * Matrices F32, F16 or BF16 (wkv_b: not external, the kernels read its rows); norms F32 vectors. */
typedef struct troupe_cuda_mla_layer {
    troupe_cuda_matrix wq;        /* [H (qk_nope + rope_dim), dim]; data null with a query LoRA */
    troupe_cuda_matrix wq_a;      /* [q_lora_rank, dim] or data null */
    troupe_cuda_matrix q_a_norm;  /* [q_lora_rank] */
    troupe_cuda_matrix wq_b;      /* [H (qk_nope + rope_dim), q_lora_rank] */
    troupe_cuda_matrix wkv_a;     /* [R + rope_dim, dim] */
    troupe_cuda_matrix kv_a_norm; /* [R] */
    troupe_cuda_matrix wkv_b;     /* [H (qk_nope + v_dim), R] */
} troupe_cuda_mla_layer;

#define TROUPE_CUDA_MLA_MAX_LATENT 1024 /* R + rope_dim at most */

#define TROUPE_CUDA_ACT_SILU 0      /* SwiGLU: silu(gate) * up */
#define TROUPE_CUDA_ACT_GELU_TANH 1 /* GeGLU: gelu_tanh(gate rounded to f16) * up, as ggml */

typedef struct troupe_cuda_model_desc {
    uint32_t struct_size;
    int32_t n_vocab;
    int32_t dim;
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim; /* at most 256 */
    int32_t ffn_dim;
    int32_t n_ctx;
    float rms_eps;
    float rope_base;       /* theta_i = pos * rope_freq_scale * rope_base^(-2 i / rope_n_rot), i < rope_n_rot / 2 */
    float rope_freq_scale; /* linear position scaling: 1 = none (1 / the scaling factor) */
    int32_t rope_n_rot;    /* leading dimensions of each head that rotate (even, <= head_dim); the rest pass */
    int32_t rope_neox;     /* 0: rotate adjacent pairs (2i, 2i+1); 1: pairs (i, i + rope_n_rot / 2) */
    const troupe_cuda_layer* layers; /* [n_layers] */
    troupe_cuda_matrix token_embd;   /* [n_vocab, dim] */
    troupe_cuda_matrix output_norm;  /* [dim] F32 */
    troupe_cuda_matrix output;       /* [n_vocab, dim]; may be token_embd itself (tied), uploaded once */
    /* KV cache */
    uint32_t kv_type; /* TROUPE_CUDA_F32 or TROUPE_CUDA_F16 */
    int32_t block_size;
    int32_t n_blocks; /* 0: min(max_kv_tokens, kv_memory_fraction of the free memory after weights) / block_size */
    int64_t max_kv_tokens;
    float kv_memory_fraction;
    /* Revision 4, read only where struct_size covers them (a revision-3 description has none: llama):
     *   x = embed(tokens) * embed_scale; scores = (q . k) * attn_scale, then attn_softcap * tanh(s / attn_softcap);
     *   logits = final_softcap * tanh(logits / final_softcap). Zeros mean "none" (attn_scale 0: 1 / sqrt(head_dim)). */
    const troupe_cuda_layer_features* layer_features; /* [n_layers] or null: no layer has any */
    int32_t ffn_activation;                           /* TROUPE_CUDA_ACT_SILU or TROUPE_CUDA_ACT_GELU_TANH */
    float embed_scale;                                /* 0 or 1: none (gemma2: sqrt(dim)) */
    float attn_scale;                                 /* 0: 1 / sqrt(head_dim) */
    float attn_softcap;                               /* 0: none */
    float final_softcap;                              /* 0: none */
    /* Revision 6, read only where struct_size covers them: taps. After each intermediate whose TROUPE_TAP_BIT is in
     * tap_wanted, the forward calls tap(tap_ctx, ...); for those also in tap_host it first copies the rows to host
     * memory on lane 0 and waits. A message returned fails the step. */
    uint64_t tap_wanted;
    uint64_t tap_host;
    troupe_cuda_tap_fn tap;
    void* tap_ctx;
    /* Revision 8, read only where struct_size covers them: experts (troupe_cuda_moe_layer). */
    const troupe_cuda_moe_layer* moe_layers; /* [n_layers] or null: every FFN is dense */
    int32_t moe_n_experts;
    int32_t moe_n_used;     /* top k, at most TROUPE_CUDA_MAX_EXPERTS_USED */
    int32_t moe_expert_ffn; /* units of one routed expert */
    int32_t moe_shared_ffn; /* units of the shared experts' FFN; 0: none */
    int32_t moe_gating;     /* 1 softmax, 2 sigmoid */
    int32_t moe_norm_weights;
    float moe_weights_scale;
    /* Revision 10, read only where struct_size covers them: multi-head latent attention in every layer
     * (troupe_cuda_mla_layer), where mla_layers is set. The pool of a layer then holds latent rows only (no V pool).
     * RoPE pair i < mla_rope_dim / 2 at position p turns by theta = p * mla_rope_freq[i], or with YaRN (mla_yarn_factor
     * > 1) by (theta / factor) * (1 - mla_rope_ramp[i]) + theta * mla_rope_ramp[i] (core/model/mla_params.h); the
     * scores' scale is attn_scale. The arrays are host memory read at model_create. */
    const troupe_cuda_mla_layer* mla_layers; /* [n_layers] or null: no layer is latent */
    int32_t mla_q_lora_rank;                 /* 0: wq */
    int32_t mla_kv_lora_rank;
    int32_t mla_qk_nope;
    int32_t mla_rope_dim;
    int32_t mla_v_dim;
    float mla_yarn_factor;
    const float* mla_rope_freq; /* [mla_rope_dim / 2] */
    const float* mla_rope_ramp; /* [mla_rope_dim / 2] */
} troupe_cuda_model_desc;

#define TROUPE_CUDA_MAX_EXPERTS 256
#define TROUPE_CUDA_MAX_EXPERTS_USED 16

/* The size of a revision-3 model description (no architecture features: the llama graph). */
/* The size of a revision-3 model description (no architecture features: the llama graph); it ended with the float
 * kv_memory_fraction after an int64_t, padded to 8 bytes, where the pointer layer_features now starts. */
#define TROUPE_CUDA_MODEL_DESC_V3_SIZE offsetof(troupe_cuda_model_desc, layer_features)
/* A revision-4/5 description (no taps). */
#define TROUPE_CUDA_MODEL_DESC_V4_SIZE offsetof(troupe_cuda_model_desc, tap_wanted)
/* A revision-6/7 description (no experts). */
#define TROUPE_CUDA_MODEL_DESC_V6_SIZE offsetof(troupe_cuda_model_desc, moe_layers)
/* A revision-8/9 description (no latent attention). */
#define TROUPE_CUDA_MODEL_DESC_V8_SIZE offsetof(troupe_cuda_model_desc, mla_layers)

typedef struct troupe_cuda_model_info {
    uint32_t struct_size;
    int32_t block_size;
    int32_t n_blocks;
    uint64_t weight_bytes;
    uint64_t kv_bytes;
} troupe_cuda_model_info;

/* One step for a batch of sequences, flattened; everything in host memory. The host has validated
 * every index (tokens < n_vocab, block ids < n_blocks, tables covering every position). */
typedef struct troupe_cuda_batch {
    uint32_t struct_size;
    int32_t n_tokens;
    const int32_t* tokens;    /* [n_tokens] */
    const int32_t* positions; /* [n_tokens] position of each token in its sequence */
    const int32_t* seq_of;    /* [n_tokens] index of each token's sequence */
    int32_t n_seqs;
    const int32_t* block_table_offsets; /* [n_seqs + 1] into block_tables */
    const int32_t* block_tables;        /* [block_table_offsets[n_seqs]] */
    int32_t n_out_rows;
    const int32_t* out_tokens; /* [n_out_rows] token index whose logits are wanted */
    float* logits;             /* [n_out_rows, n_vocab] written by forward */
    /* Revision 3, read only where struct_size covers them (a host of revision 2 sends the struct without):
     * tree attention (core/model/ops.h attention_call, core/model/draft_layout.h). With `rows` set, token t
     * writes its K/V at row rows[t] of its sequence (positions[t] is only its RoPE position) and attends to
     * the rows r < mask_base[t] and the rows mask_base[t] + 64 w + j where bit j of mask[t * mask_words + w]
     * is set. Null rows: causal by position. */
    const int32_t* rows;      /* [n_tokens] or null */
    const int32_t* mask_base; /* [n_tokens] */
    const uint64_t* mask;     /* [n_tokens, mask_words] */
    int32_t mask_words;       /* 0..TROUPE_CUDA_MAX_MASK_WORDS */
} troupe_cuda_batch;

/* The size of a revision-2 batch (no tree fields), and the most mask words a tree call carries. */
#define TROUPE_CUDA_BATCH_V2_SIZE offsetof(troupe_cuda_batch, rows)
#define TROUPE_CUDA_MAX_MASK_WORDS 16

/* Host-buffer arguments of the attention kernel test: stores k, v into the pools, then attends
 * (core/model/ops.h attention_call semantics). Pools are in and out. */
typedef struct troupe_cuda_attention_args {
    uint32_t struct_size;
    int32_t n_tokens;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
    float scale;
    const float* q; /* [n_tokens, n_heads, head_dim] */
    const float* k; /* [n_tokens, n_kv_heads, head_dim] */
    const float* v; /* [n_tokens, n_kv_heads, head_dim] */
    float* out;     /* [n_tokens, n_heads, head_dim] */
    const int32_t* positions;
    const int32_t* seq_of;
    int32_t n_seqs;
    const int32_t* block_table_offsets;
    const int32_t* block_tables;
    int32_t block_size;
    int32_t n_blocks;
    uint32_t kv_type; /* F32: pools are float; F16: pools are uint16_t halves */
    void* k_pool;     /* [n_blocks, block_size, n_kv_heads, head_dim] */
    void* v_pool;
    /* Revision 3: tree attention, as in troupe_cuda_batch (null rows: causal). */
    const int32_t* rows;
    const int32_t* mask_base;
    const uint64_t* mask;
    int32_t mask_words;
    /* Revision 4: soft-capping (scores s -> softcap * tanh(s / softcap) after scaling; 0: none) and a sliding
     * window (a token at position p sees positions > p - window; 0: all). In a tree call the k-th row of a token's
     * mask (ascending) is at position mask_base + k, as core/model/ops.h says. */
    float softcap;
    int32_t window;
} troupe_cuda_attention_args;

#define TROUPE_CUDA_ATTENTION_ARGS_V2_SIZE offsetof(troupe_cuda_attention_args, rows)
/* A revision-3 struct's size: through mask_words and the padding after it to the struct's 8-byte alignment, where
 * softcap now sits (so a revision-3 caller's struct_size covers softcap but not window: neither is read from it). */
#define TROUPE_CUDA_ATTENTION_ARGS_V3_SIZE \
    ((offsetof(troupe_cuda_attention_args, mask_words) + sizeof(int32_t) + 7) / 8 * 8)

/* Revision 10: host-buffer arguments of the latent attention test: a layer's MLA block from its q and latent products
 * on (troupe_cuda_mla_layer's rule): the latent normed and RoPE'd with q, stored into the pool, attended, expanded. */
typedef struct troupe_cuda_mla_attention_args {
    uint32_t struct_size;
    int32_t n_tokens;
    int32_t n_heads;
    int32_t kv_lora_rank;
    int32_t qk_nope;
    int32_t rope_dim;
    int32_t v_dim;
    float scale;
    float eps;
    const float* q;                  /* [n_tokens, n_heads, qk_nope + rope_dim], before RoPE */
    const float* latent;             /* [n_tokens, kv_lora_rank + rope_dim], before the norm and RoPE */
    const float* kv_a_norm;          /* [kv_lora_rank] */
    const troupe_cuda_matrix* wkv_b; /* [n_heads * (qk_nope + v_dim), kv_lora_rank], F32 / F16 / BF16 */
    const float* rope_freq;          /* [rope_dim / 2] */
    const float* rope_ramp;          /* [rope_dim / 2] */
    float yarn_factor;               /* 1: none */
    float* out;                      /* [n_tokens, n_heads * v_dim] */
    const int32_t* positions;
    const int32_t* seq_of;
    int32_t n_seqs;
    const int32_t* block_table_offsets;
    const int32_t* block_tables;
    int32_t block_size;
    int32_t n_blocks;
    uint32_t kv_type;    /* F32 or F16 pool */
    void* pool;          /* [n_blocks, block_size, kv_lora_rank + rope_dim], in and out */
    const int32_t* rows; /* tree attention as troupe_cuda_batch's, or null: causal */
    const int32_t* mask_base;
    const uint64_t* mask;
    int32_t mask_words;
} troupe_cuda_mla_attention_args;

#define TROUPE_CUDA_MATMUL_CUBLASLT 0
#define TROUPE_CUDA_MATMUL_SIMPLE 1

typedef struct troupe_cuda_ops {
    uint32_t struct_size;
    uint32_t abi_version;
    const char* build_info; /* "troupe_cuda abi 1 revision 2, CUDA runtime 13000, built for 90-real 80-virtual" */

    /* Discovery */
    const char* (*device_count)(int32_t* n_devices);
    const char* (*device_info)(int32_t device, troupe_cuda_device_info* info);

    /* Context: one device, n_lanes >= 1 streams */
    const char* (*context_create)(int32_t device, int32_t n_lanes, troupe_cuda_context** out);
    void (*context_destroy)(troupe_cuda_context* ctx);
    const char* (*context_synchronize)(troupe_cuda_context* ctx);
    void* (*context_stream)(troupe_cuda_context* ctx, int32_t lane); /* the cudaStream_t */

    /* Model: weights uploaded on lane 0; destroyed before its context */
    const char* (*model_create)(troupe_cuda_context* ctx, const troupe_cuda_model_desc* desc, troupe_cuda_model** out);
    void (*model_destroy)(troupe_cuda_model* model);
    void (*model_info)(const troupe_cuda_model* model, troupe_cuda_model_info* info);
    const char* (*model_forward)(troupe_cuda_model* model, const troupe_cuda_batch* batch);
    /* Copies whole KV blocks src[i] -> dst[i] in every layer's pools on `lane` (copy-on-write forks). */
    const char* (*model_copy_blocks)(troupe_cuda_model* model, int32_t lane, const int32_t* src, const int32_t* dst,
                                     int32_t n);

    /* Each kernel on host buffers, synchronous on lane 0: for tests against CPU references. */
    const char* (*test_rms_norm)(troupe_cuda_context* ctx, const float* x, const float* w, float* y, int32_t n_rows,
                                 int32_t dim, float eps);
    const char* (*test_rope)(troupe_cuda_context* ctx, float* x, const int32_t* positions, int32_t n_tokens,
                             int32_t n_heads, int32_t head_dim, int32_t n_rot, float base, float freq_scale,
                             int32_t neox); /* x [n_tokens, n_heads, head_dim] in place */
    const char* (*test_matmul)(troupe_cuda_context* ctx, int32_t impl, const troupe_cuda_matrix* w, const float* x,
                               float* y, int32_t n_tokens); /* y[n_tokens, n_out] = x[n_tokens, n_in] W^T */
    const char* (*test_attention)(troupe_cuda_context* ctx, const troupe_cuda_attention_args* args);
    const char* (*test_swiglu)(troupe_cuda_context* ctx, const float* gate, const float* up, float* out, int64_t n);
    const char* (*test_embed)(troupe_cuda_context* ctx, const troupe_cuda_matrix* table, const int32_t* tokens,
                              int32_t n_tokens, float* out); /* out[n_tokens, n_in] */

    /* Revision 2: swap preemption. Copies whole KV blocks blocks[0..n) of every layer's K and V pools
     * from the device to `host` (read) or from `host` to the device (write) on `lane`, after the work
     * issued earlier on the other lanes, and waits for that lane before returning: on return the host
     * buffer is complete (read) or may be reused (write). Block ids are checked against the pool; a bad
     * id fails the call before anything is copied. Host memory may be pageable or pinned.
     *
     * Host layout, pool p = 2 * layer + (0: K, 1: V), block_bytes = block_size * n_kv_heads * head_dim
     * * element size (= model_info kv_bytes / n_blocks / (2 * n_layers)):
     *
     *   host: | pool 0 (layer 0 K)          | pool 1 (layer 0 V)          | ... | pool 2*n_layers-1    |
     *         | blocks[0] | ... | blocks[n-1]| blocks[0] | ... | blocks[n-1]| ... |                      |
     *   (p, i) at byte (p * n + i) * block_bytes; 2 * n_layers * n * block_bytes bytes in all
     *
     * With latent attention (revision 10) pool p is layer p's latent pool (n_layers pools, block_bytes = block_size *
     * (kv_lora_rank + rope_dim) * element size): the same layout over n_layers pools.
     */
    const char* (*model_read_blocks)(troupe_cuda_model* model, int32_t lane, const int32_t* blocks, int32_t n,
                                     void* host);
    const char* (*model_write_blocks)(troupe_cuda_model* model, int32_t lane, const int32_t* blocks, int32_t n,
                                      const void* host);

    /* Revision 3: after a tree step, copies KV rows src[i] -> dst[i] (rows of the pools: block * block_size +
     * row in block) of every layer's K and V pools on `lane`, in order (i = 0 first: a later source may be an
     * earlier destination's neighbour, never a row already overwritten, see core/model/draft_layout.h), after
     * the work issued earlier on the other lanes. Rows are checked against the pool first. */
    const char* (*model_copy_rows)(troupe_cuda_model* model, int32_t lane, const int32_t* src, const int32_t* dst,
                                   int32_t n);

    /* Revision 4: the architecture features' kernels on host buffers, synchronous on lane 0. */
    const char* (*test_geglu)(troupe_cuda_context* ctx, const float* gate, const float* up, float* out,
                              int64_t n); /* out = gelu_tanh(f16(gate)) * up */
    const char* (*test_add_bias)(troupe_cuda_context* ctx, float* x, const float* bias, int32_t n_rows,
                                 int32_t width); /* x[r, i] += bias[i] in place */
    const char* (*test_softcap)(troupe_cuda_context* ctx, float* x, int64_t n,
                                float cap); /* x = cap * tanh(x / cap) in place */

    /* Revision 5: the host orders the lanes (core/runtime/device_stream.h). lane_record makes an event after the
     * work enqueued on `lane` so far (*out, destroyed by event_destroy); lane_wait makes the work enqueued on `lane`
     * from now on wait for an event (of any lane of the context); lane_synchronize blocks until `lane` is idle.
     * context_set_explicit_order(ctx, 1): from then on no op waits for the other lanes on its own (0: back to the
     * default). model_forward_fenced is model_forward that calls fence(arg, event) once the layers (every KV
     * write) are enqueued on lane 0; on failure before that point it calls nothing. */
    const char* (*lane_record)(troupe_cuda_context* ctx, int32_t lane, troupe_cuda_event** out);
    const char* (*lane_wait)(troupe_cuda_context* ctx, int32_t lane, const troupe_cuda_event* event);
    const char* (*lane_synchronize)(troupe_cuda_context* ctx, int32_t lane);
    void (*event_destroy)(troupe_cuda_event* event);
    const char* (*context_set_explicit_order)(troupe_cuda_context* ctx, int32_t on);
    const char* (*model_forward_fenced)(troupe_cuda_model* model, const troupe_cuda_batch* batch,
                                        troupe_cuda_fence_fn fence, void* arg);

    /* Revision 6: the taps the forward reports from now on (troupe_cuda_model_desc.tap_*; wanted 0: none). A model
     * may also take weights of type TROUPE_CUDA_EXTERNAL (troupe_cuda_external_matrix). */
    const char* (*model_set_taps)(troupe_cuda_model* model, uint64_t wanted, uint64_t host, troupe_cuda_tap_fn tap,
                                  void* ctx);

    /* Revision 7: y[i] = x W[i]^T for the n (1..3) matrices of one n_in, made together as a layer makes q, k, v; with
     * glu 1 (SiLU) or 2 (tanh GELU of the F16-rounded gate), n = 2 and y[0] = act(x W[0]^T) * (x W[1]^T), as a layer
     * makes its FFN's hidden rows (y[1] is scratch). Synchronous on lane 0, host buffers [n_tokens, W[i].n_out]. */
    const char* (*test_matmul_group)(troupe_cuda_context* ctx, const troupe_cuda_matrix* w, int32_t n, const float* x,
                                     int32_t n_tokens, int32_t glu, float* const* y);

    /* Revision 8: the experts' router on host buffers (troupe_cuda_moe_layer's rule), synchronous on lane 0:
     * logits [n_tokens, n_experts], bias [n_experts] or null -> experts, weights [n_tokens, n_used]. */
    const char* (*test_moe_route)(troupe_cuda_context* ctx, const float* logits, int32_t n_tokens, int32_t n_experts,
                                  int32_t n_used, int32_t gating, int32_t norm_weights, float weights_scale,
                                  const float* bias, int32_t* experts, float* weights);

    /* Revision 9: device-to-device copies of `bytes` on lane 0 (after one untimed), `reps` of them timed by events:
     * *gb_per_s = read + written bytes per second / 1e9. Allocates 2 x bytes for the call; synchronous. */
    const char* (*measure_copy)(troupe_cuda_context* ctx, uint64_t bytes, int32_t reps, double* gb_per_s);

    /* Revision 10: latent attention's kernels on host buffers (troupe_cuda_mla_attention_args), synchronous on lane 0.
     */
    const char* (*test_mla_attention)(troupe_cuda_context* ctx, const troupe_cuda_mla_attention_args* args);
} troupe_cuda_ops;

/* The size of a revision-1 table: the smallest the host accepts. */
#define TROUPE_CUDA_OPS_MIN_SIZE offsetof(troupe_cuda_ops, model_read_blocks)
/* Whether a library's table (ops: const troupe_cuda_ops*) provides an op appended after revision 1. */
#define TROUPE_CUDA_OPS_HAS(ops, field)                                                               \
    ((ops)->struct_size >= offsetof(troupe_cuda_ops, field) + sizeof(((troupe_cuda_ops*)0)->field) && \
     (ops)->field != NULL)

typedef const troupe_cuda_ops* (*troupe_cuda_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_CUDA_BACKEND_ABI_H */
