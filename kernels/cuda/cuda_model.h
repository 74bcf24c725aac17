// A model on the device (the llama graph and the dense families' features: cuda_backend_abi.h revision 4): packed
// weights and the per-layer KV pools (cuda_model.cpp), the step's scratch buffers and the whole forward on lane 0
// (cuda_model_forward.cpp), KV block copies and swaps (cuda_model_kv.cpp).
//
// One step, for the n_tokens of all sequences together:
//
//   x = embed(tokens) [* embed_scale]                           [n_tokens, dim]
//   per layer:  xn = rms_norm(x) * attn_norm
//               q, k, v = xn wq^T [+ bq], xn wk^T [+ bk], xn wv^T [+ bv]; rope(q, k)
//                                                                [n_tokens, n_(kv_)heads * head_dim]
//               store k, v at each token's (block, row); att = attention(q, pools) [soft-capped, windowed]
//               or, with latent attention, att = the MLA block's output (cuda_backend_abi.h revision 10, cuda_mla.h)
//               a = att wo^T; x += a, or rms_norm(a) * post_attn_norm where the layer has one
//               xn = rms_norm(x) * ffn_norm
//               f = (act(xn w_gate^T) * (xn w_up^T)) w_down^T    act: silu, or gelu_tanh (GeGLU)
//                   or, in a MoE layer, the routed experts' f weighted [+ the shared experts' f]
//               x += f, or rms_norm(f) * post_ffn_norm
//   rows = x[out_tokens]; logits = (rms_norm(rows) * output_norm) output^T   [n_out_rows, n_vocab]
//   [logits = final_softcap * tanh(logits / final_softcap)]
#pragma once

#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_matmul.h"
#include "kernels/cuda/cuda_moe_groups.h"
#include "kernels/cuda/cuda_step_graphs.h"

namespace troupe::cuda {

struct device_layer {
    const float* attn_norm;  // [dim]
    device_matrix wq, wk, wv, wo;
    const float* ffn_norm;  // [dim]
    device_matrix w_gate, w_up, w_down;
    // Architecture features (troupe_cuda_layer_features); null / 0 where the layer has none.
    const float* bq = nullptr;              // [n_heads * head_dim]
    const float* bk = nullptr;              // [n_kv_heads * head_dim]
    const float* bv = nullptr;              // [n_kv_heads * head_dim]
    const float* post_attn_norm = nullptr;  // [dim]
    const float* post_ffn_norm = nullptr;   // [dim]
    int32_t window = 0;                     // positions > p - window; 0: all
    // A mixture-of-experts FFN in place of w_gate, w_up, w_down (troupe_cuda_moe_layer); moe false: dense.
    bool moe = false;
    device_matrix router, gate_exps, up_exps, down_exps;
    const float* probs_bias = nullptr;               // [n_experts] or null
    device_matrix gate_shexp, up_shexp, down_shexp;  // n_out 0: no shared experts
    // Multi-head latent attention (troupe_cuda_mla_layer) in place of wq, wk, wv; mla false: standard attention.
    bool mla = false;
    device_matrix mla_wq, mla_wq_a, mla_wq_b, mla_wkv_a, mla_wkv_b;  // mla_wq without a query LoRA, the other two with
    const float* mla_q_a_norm = nullptr;                             // [q_lora_rank]
    const float* mla_kv_a_norm = nullptr;                            // [kv_lora_rank]
};

const char* model_create(troupe_cuda_context* ctx, const troupe_cuda_model_desc* desc, troupe_cuda_model** out);
void model_destroy(troupe_cuda_model* model);
void model_info(const troupe_cuda_model* model, troupe_cuda_model_info* info);
const char* model_forward(troupe_cuda_model* model, const troupe_cuda_batch* batch);
// model_forward that hands fence(arg, event) an event after the layers (revision 5); fence may be null.
const char* model_forward_fenced(troupe_cuda_model* model, const troupe_cuda_batch* batch, troupe_cuda_fence_fn fence,
                                 void* arg);
const char* model_copy_blocks(troupe_cuda_model* model, int32_t lane, const int32_t* src, const int32_t* dst,
                              int32_t n);
// KV rows src[i] -> dst[i] (block * block_size + row) of every pool, in order on `lane` (keep_tree_path).
const char* model_copy_rows(troupe_cuda_model* model, int32_t lane, const int32_t* src, const int32_t* dst, int32_t n);

// The tree fields of a batch or of the attention test's arguments (cuda_backend_abi.h), checked on the host: mask
// words in range, every row a token writes or sees inside its sequence's block table, at least one row seen.
struct tree_call {
    const int32_t* rows;
    const int32_t* mask_base;
    const uint64_t* mask;
    int32_t mask_words;
};
const char* check_tree_call(const tree_call& c, int32_t n_tokens, const int32_t* seq_of,
                            const int32_t* block_table_offsets, int32_t block_size);
// Swap: whole blocks of every pool to / from a host buffer laid out [pool][i < n][block bytes]
// (cuda_backend_abi.h); both wait for `lane` before returning, also when they fail part-way.
const char* model_read_blocks(troupe_cuda_model* model, int32_t lane, const int32_t* blocks, int32_t n, void* host);
const char* model_write_blocks(troupe_cuda_model* model, int32_t lane, const int32_t* blocks, int32_t n,
                               const void* host);

// Uploads a host matrix packed (row stride n_in) into a new buffer on `stream` (our streams do not
// synchronize with the legacy default stream, so every copy goes on the stream that uses it); checks
// type and strides.
const char* upload_matrix(const troupe_cuda_matrix& m, const char* what, device_buffer& buf, device_matrix& out,
                          cudaStream_t stream);

}  // namespace troupe::cuda

struct troupe_cuda_model {
    troupe_cuda_context* ctx = nullptr;
    troupe_cuda_model_desc hp{};  // hyper-parameters; its pointers are not kept
    std::vector<troupe::cuda::device_buffer> weights;
    std::vector<std::unique_ptr<troupe_cuda_external_matrix>> externals;  // plugins' weights (revision 6), by value
    std::vector<troupe::cuda::device_layer> layers;                       // [n_layers]
    troupe::cuda::device_matrix token_embd;                               // [n_vocab, dim]
    const float* output_norm = nullptr;                                   // [dim]
    troupe::cuda::device_matrix output;                                   // [n_vocab, dim]
    uint64_t weight_bytes = 0;

    int32_t n_blocks = 0;
    int32_t n_pools = 0;             // 2 * n_layers (K, V), or n_layers latent pools (revision 10)
    size_t pool_bytes = 0;           // one pool: n_blocks * block_size * (n_kv_heads * head_dim or latent) * element
    troupe::cuda::device_buffer kv;  // [n_layers][k, v] pools, or [n_layers] latent pools
    troupe::cuda::device_buffer mla_rope;  // [2, rope_dim / 2]: latent attention's RoPE frequencies, then YaRN ramps

    int32_t capacity = 0;                            // tokens the scratch holds
    troupe::cuda::device_buffer scratch;             // activations, see cuda_model_forward.cpp
    troupe::cuda::device_buffer ints;                // the batch's index arrays
    troupe::cuda::device_buffer attention_partials;  // split decode attention's (cuda_kernels.h), zeroed once
    troupe::cuda::device_buffer mla_partials;        // split latent attention's records (cuda_mla.h), with MLA
    std::vector<int32_t> host_ints;
    std::vector<int32_t> tiles;        // the step's attention tiles (attention_tiles), before upload
    std::vector<float> tap_rows;       // a tap's rows copied to the host (tap_host)
    troupe::cuda::step_graphs graphs;  // decode-sized steps replayed (cuda_step_graphs.h)
    std::vector<int32_t> moe_experts;  // a prefill step's routing copied to the host, and its pairs grouped by expert
    troupe::cuda::moe_host_groups moe_groups;
};
