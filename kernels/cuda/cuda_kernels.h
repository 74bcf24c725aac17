// The CUDA kernels of the Llama forward, as host-callable launchers (defined in cuda_kernels.cu, attention in
// cuda_attention.cu: the files nvcc compiles). Every launcher enqueues on `stream` and returns at once; the caller
// checks cudaGetLastError. All tensors are device pointers, row-major, shapes on each declaration. Weights are packed:
// row i of an [n_out, n_in] matrix starts at element i * n_in.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace troupe::cuda {

enum class dtype : uint32_t { f32 = 0, f16 = 1, bf16 = 30 };  // ggml numbering, as the ABI

inline constexpr int32_t max_head_dim = 256;

// out[t, :] = table[tokens[t], :] as float.  table [n_vocab, dim], out [n_tokens, dim]
void launch_embed(dtype table_type, const void* table, int64_t dim, const int32_t* tokens, int32_t n_tokens, float* out,
                  cudaStream_t stream);

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w.  x, y [n_rows, dim], w [dim]; y may alias x
void launch_rms_norm(const float* x, const float* w, float* y, int32_t n_rows, int32_t dim, float eps,
                     cudaStream_t stream);

// Rotates the first n_rot dimensions of each head of x [n_tokens, n_heads, head_dim] in place by
// theta_i = positions[t] * freq_scale * base^(-2 i / n_rot) (computed in double, as kernels/ref does),
// pairs (2i, 2i+1) (normal) or (i, i + n_rot / 2) (neox).
struct rope_settings {
    int32_t head_dim;
    int32_t n_rot;
    float base;
    float freq_scale;
    bool neox;
};
void launch_rope(float* x, const int32_t* positions, int32_t n_tokens, int32_t n_heads, const rope_settings& rope,
                 cudaStream_t stream);

// Where the tokens of a step find their sequence's KV blocks.
struct kv_tables {
    const int32_t* positions;            // [n_tokens]
    const int32_t* seq_of;               // [n_tokens]
    const int32_t* block_table_offsets;  // [n_seqs + 1]
    const int32_t* block_tables;         // [block_table_offsets[n_seqs]]
    int32_t block_size;
    // Tree attention (cuda_backend_abi.h troupe_cuda_batch): with rows set, token t writes its K/V at row rows[t]
    // and sees the rows r < mask_base[t] and those its mask bits name (bit j of word w: mask_base[t] + 64 w + j).
    const int32_t* rows = nullptr;       // [n_tokens] or null: causal by position
    const int32_t* mask_base = nullptr;  // [n_tokens]
    const uint64_t* mask = nullptr;      // [n_tokens, mask_words]
    int32_t mask_words = 0;
};

// Writes k, v [n_tokens, n_kv_heads * head_dim] into the pools [n_blocks, block_size, n_kv_heads, head_dim]
// (float, or half when kv_f16) at each token's position (its row in a tree call).
void launch_store_kv(const float* k, const float* v, int32_t n_tokens, int32_t kv_width, const kv_tables& tables,
                     bool kv_f16, void* k_pool, void* v_pool, cudaStream_t stream);

// launch_rope(q), launch_rope(k), then launch_store_kv in one launch (same results): a block per token.
// q [n_tokens, n_heads, head_dim] and k [n_tokens, n_kv_heads, head_dim] rotated in place, k and v stored.
void launch_rope_store_kv(float* q, float* k, const float* v, int32_t n_tokens, int32_t n_heads, int32_t n_kv_heads,
                          const rope_settings& rope, const kv_tables& tables, bool kv_f16, void* k_pool, void* v_pool,
                          cudaStream_t stream);

// A layer's attention beyond plain causal softmax (core/model/ops.h attention_call): soft-capping of the scaled
// scores (s -> softcap * tanh(s / softcap); 0: none) and a sliding window (positions > p - window; 0: all).
struct attention_features {
    float softcap = 0.0f;
    int32_t window = 0;
};

// Causal GQA attention over the pools (which already hold this step's rows): for token t at position p of
// sequence s and head h, out[t, h] = softmax(cap(scale * q[t, h] . k[s, f..p, h / group])) . v[s, f..p, h / group]
// with f = max(0, p - window + 1) (0 without a window) and cap the soft-capping (identity without).
// q, out [n_tokens, n_heads, head_dim]; head_dim <= max_head_dim. In a tree call (tables.rows) over the rows
// the token sees instead of f..p (its masked rows by their positions mask_base + k, cuda_kernels.cu sees()).
//
// With split_scratch (attention_split_scratch_bytes, zeroed once when allocated, then used by one stream at a time)
// a step of few (token, head) items, as decode has, shares each item's keys among up to attention_max_splits warps
// and merges their partial softmaxes (flash-decoding): one warp per item would walk a long context alone. The split
// count depends on the item count alone, so a step graph keeps it; which splits have rows depends on the context.
//
// With tiles (attention_tiles below; device memory, n_tiles pairs) the prefill kernel runs instead: one block per
// (tile, head) stages each 32 keys of the tile's sequence in shared memory once for the tile's 32 queries (the
// per-token kernel reads every key once per query). Same results to float rounding (another summation order).
inline constexpr int32_t attention_max_splits = 32;
inline constexpr int32_t attention_split_max_items = 1024;  // more items than this run unsplit
inline constexpr size_t attention_split_scratch_bytes =
    (attention_split_max_items + size_t{2} * attention_split_max_items * (max_head_dim + 2)) * sizeof(float);
void launch_attention(const float* q, float* out, int32_t n_tokens, int32_t n_heads, int32_t n_kv_heads,
                      int32_t head_dim, float scale, const attention_features& features, const kv_tables& tables,
                      bool kv_f16, const void* k_pool, const void* v_pool, cudaStream_t stream,
                      void* split_scratch = nullptr, const int32_t* tiles = nullptr, int32_t n_tiles = 0);

// The prefill kernel's tiles: runs of up to attention_tile_rows tokens of one sequence at consecutive positions, as
// (first token, n_rows) pairs, padded with (0, 0) to attention_max_tiles so that the launch's shape depends on the
// step's token and sequence counts alone (a step graph keeps it). False where the kernel does not apply: a tree call,
// head_dim > attention_tiled_max_head_dim or not a multiple of 4, a decode-only step (one token per sequence: the
// per-token kernel), or positions that break into more runs than that bound.
inline constexpr int32_t attention_tile_rows = 32;
inline constexpr int32_t attention_tiled_max_head_dim = 128;
int32_t attention_max_tiles(int32_t n_tokens, int32_t n_seqs);
bool attention_tiles(const int32_t* seq_of, const int32_t* positions, int32_t n_tokens, int32_t n_seqs,
                     int32_t head_dim, bool tree, std::vector<int32_t>& tiles);

// out[i] = silu(gate[i]) * up[i]; out may alias gate.  [n]
void launch_swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);

// out[i] = gelu_tanh(gate[i] rounded to f16) * up[i] (GeGLU, as core/model/cpu_ops.cpp); out may alias gate.  [n]
void launch_geglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);

// x[r, i] += bias[i].  x [n_rows, width], bias [width]
void launch_add_bias(float* x, const float* bias, int32_t n_rows, int32_t width, cudaStream_t stream);

// x[i] += y[i]; x[i] *= s; x[i] = cap * tanh(x[i] / cap).  [n]
void launch_add(float* x, const float* y, int64_t n, cudaStream_t stream);
void launch_scale(float* x, float s, int64_t n, cudaStream_t stream);
void launch_softcap(float* x, float cap, int64_t n, cudaStream_t stream);

// y[i] = x[i] rounded to `to` (f16 or bf16).  [n]
void launch_convert(const float* x, dtype to, void* y, int64_t n, cudaStream_t stream);

// y[t, o] (+)= sum_k x[t, k] * w[o, k]: the plain fallback of the cuBLASLt product, F32 accumulation.
// w [n_out, n_in] of w_type, x [n_tokens, n_in], y [n_tokens, n_out]
// y[t, o] (+)= x[t, :] . w[o, :] for n_tokens <= gemv_max_tokens, reading the weights once for all tokens: decode's
// products in one launch each (cuBLASLt adds a split-k reduction there). The activations are rounded to the weight's
// 16-bit type as they are read (cuBLASLt's recipe), F32 accumulation. More tokens than 2 read the activations from
// L2 once per row and lose to cuBLASLt (measured on the H200).
inline constexpr int32_t gemv_max_tokens = 2;
void launch_gemv(dtype w_type, const void* w, int64_t n_in, int64_t n_out, const float* x, float* y, int32_t n_tokens,
                 bool accumulate, cudaStream_t stream);

// Several products of the same x in one launch (q, k, v: a decode layer's smallest products cost their launch's ramp
// more than their bytes), each as launch_gemv makes it. With a GLU, parts[0] is the gate and parts[1] the up
// matrix (same n_out): parts[0].y[t, o] = act(gate . x[t]) * (up . x[t]), the activation as launch_swiglu and
// launch_geglu compute it (same bits), never accumulated; parts[1].y is unused.
enum class glu_kind : int32_t { none, silu, gelu_tanh };
struct gemv_part {
    const void* w;  // [n_out, n_in] of the launch's type
    float* y;       // [n_tokens, n_out]
    int64_t n_out;
};
inline constexpr int32_t gemv_max_parts = 3;
void launch_gemv_parts(dtype w_type, int64_t n_in, const float* x, int32_t n_tokens, const gemv_part* parts,
                       int32_t n_parts, glu_kind glu, bool accumulate, cudaStream_t stream);

void launch_matmul_simple(dtype w_type, const void* w, int64_t n_in, int64_t n_out, const float* x, float* y,
                          int32_t n_tokens, bool accumulate, cudaStream_t stream);

// y[r, :] = x[rows[r], :].  x [*, dim], y [n_rows, dim]
void launch_gather_rows(const float* x, const int32_t* rows, int32_t n_rows, int32_t dim, float* y,
                        cudaStream_t stream);

}  // namespace troupe::cuda
