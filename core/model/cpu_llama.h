// cpu_llama: troupe's model graph on the CPU, for every architecture it runs (llama, mistral, qwen2, phi3, gemma2;
// each one's differences are its description, core/model/arch/arch_description.h), batched over several sequences
// at their own positions.
//
// One forward() over T tokens of S sequences (prefill chunks and decodes mixed):
//
//   x = embed(tokens) · embed_scale                     [T, dim]
//   per layer:  h = rmsnorm(x) · attn_norm
//               attention block (standard):
//                 q, k, v = h·Wqᵀ + bq, h·Wkᵀ + bk, h·Wvᵀ + bv; RoPE(q, k) at each token's position
//                 a = attention(q, k, v, KV cache via block tables; the layer's window, soft-capping)  (plugin)
//                 a = a·Woᵀ
//               x += post_attn_norm ? rmsnorm(a) · post_attn_norm : a
//               h = rmsnorm(x) · ffn_norm
//               FFN block (dense): f = (act(h·W_gateᵀ) ⊙ h·W_upᵀ)·W_downᵀ        act: silu | gelu_tanh
//               x += post_ffn_norm ? rmsnorm(f) · post_ffn_norm : f
//   logits = rmsnorm(x[rows]) · output_norm · W_outᵀ     rows: each sequence's last token, or all
//   logits = final_softcap · tanh(logits / final_softcap)    where the architecture caps them
//
// All scratch is sized at construction for max_batch_tokens and reused; nothing allocates per step
// except when a step brings more tokens than any before.
//
// Speculative verification (cpu_llama_trees.cpp): a step's last n_draft tokens may be a tree of drafts (sequence_step::
// tree_parents; core/model/draft_layout.h); node i then runs at position pos0 + n_before + depth(i), writes KV row
// pos0 + n_before + i and attends to the rows before the drafts, its ancestors and itself, through a tree attention
// call (ops.h); trees of up to k_max_tree_nodes nodes, with the built-in KV pools only (a KV plugin owns its
// attention: chains only). keep_tree_path then moves the accepted path's rows into place in every layer.
//
// Taps (core/model/tap_sink.h): an attached sink observes the intermediates it wants, in graph order; a tap
// nobody wants costs one branch. Fused and separate products hand the taps the same layout ([n, width] rows).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/model/compute_context.h"
#include "core/model/kv_cache_op.h"
#include "core/model/kv_groups.h"
#include "core/model/kv_window_slots.h"
#include "core/model/linear.h"
#include "core/model/llama_weights.h"
#include "core/model/mla_block.h"
#include "core/model/model_runner.h"
#include "core/model/moe_ffn.h"
#include "core/model/tap_sink.h"
#include "kernels/cpu/huge_page_buffer.h"

namespace troupe {

struct cpu_llama_params {
    std::shared_ptr<attention_op> attention;  // required
    std::shared_ptr<quant_op> quant;          // optional
    int32_t n_threads = 0;                    // 0: all cores
    // Optional: run on this pool instead of an own one of n_threads, e.g. a draft model sharing the target's on the
    // same lane (two pools on the same cores would spin against each other).
    std::shared_ptr<cpu::thread_pool> pool;
    kv_geometry kv{0, 0};              // block_size 0: one block of n_ctx per sequence
    kv_dtype kv_type = kv_dtype::f32;  // element type of the KV pools (kv.dtype)
    int32_t max_seqs = 4;              // sizes the default pool when kv.n_blocks is 0; KV window slots
    // Optional: a KV plugin (kv.plugin) that owns the cache's layout and its attention, in place of the attention
    // op and kv_type; kv_cache_layout is its layout when the caller already asked for it (else create asks).
    std::shared_ptr<kv_cache_op> kv_cache;
    std::optional<kv_layout> kv_cache_layout;
    // Activations of the builtin kernels (types the quant plugin does not take): kernels.activations.
    cpu::activation_recipe activations = cpu::activation_recipe::quantized;
    // kernels.weights: copy the weights the builtin kernels stream into a weight_arena (true) or read them in
    // place from the mapped file (false).
    bool copy_weights = true;
    std::shared_ptr<tap_sink> taps;  // optional: observes the taps it wants (attach_taps replaces it)
    // A block table per KV group (kv_groups.h) for a model with sliding-window layers (built-in pools only): the
    // windowed layers' blocks are released by the KV allocator, and the groups share KV memory slots.
    bool kv_window_release = false;
};

class cpu_llama final : public model_runner {
public:
    static result<std::unique_ptr<cpu_llama>> create(llama_weights weights, cpu_llama_params params);

    std::string description() const override;
    int32_t n_vocab() const override { return w_.hp.n_vocab; }
    int32_t n_ctx() const override { return w_.hp.n_ctx; }
    kv_geometry kv() const override { return kv_; }
    size_t kv_bytes_per_token() const override;
    std::vector<int32_t> kv_group_windows() const override { return groups_.windows; }
    const kv_groups& groups() const { return groups_; }
    status forward(const forward_batch& batch, forward_output& out) override;
    void forget(int64_t seq_id) override;  // frees the sequence's KV window slot
    // Copy-on-write of whole blocks in every layer's pools; refused with a KV plugin (its windows are per sequence).
    status copy_blocks(std::span<const int32_t> src, std::span<const int32_t> dst) override;
    // Trees when the attention op takes tree calls and no KV plugin owns the cache.
    bool supports_trees() const override;
    status keep_tree_path(const sequence_step& step, std::span<const int32_t> path) override;

    // One layer's KV layout: the built-in pools' (kv.dtype) or the KV plugin's declaration.
    const kv_layout& kv_cache_layout() const { return kv_layout_; }

    const llama_hparams& hparams() const { return w_.hp; }
    size_t weight_bytes_per_token() const;  // bytes of weights one decode step reads
    int32_t n_threads() const { return pool_->n_threads(); }
    cpu::thread_pool& pool() { return *pool_; }
    std::shared_ptr<cpu::thread_pool> shared_pool() const { return pool_; }
    // Multiply-adds of the weight matrices per token (attention over the context not included). with_output: the
    // output matrix's too, which a token computes only where its logits are asked for (every decode token; a prompt's
    // last token only, as llama-bench's prompt processing).
    int64_t matmul_macs_per_token(bool with_output = true) const;
    // Of those, the ones the builtin kernels compute with int8 dot products (the quantized recipe with Q8_0, Q4_0,
    // Q4_K or Q6_K weights); the rest are float arithmetic (or a quant plugin's): bench sets each against its peak.
    // nibbles_only: of those, the Q4_0 panels' (4-bit codes summed in int16: cpu::measure_int8_nibble_peak).
    int64_t int8_macs_per_token(bool nibbles_only = false, bool with_output = true) const;
    // Groups (a layer's q/k/v, a layer's gate/up) that run as one matrix (linear::concatenated) in steps of at most
    // k_max_fused_tokens tokens; larger steps (prefill: GEMMs, compute-bound, where one job gains nothing) run the
    // parts one by one rather than copy the fused outputs apart.
    int32_t n_fused_groups() const { return n_fused_groups_; }
    static constexpr size_t k_max_fused_tokens = 16;
    // Observes the taps `sink` wants from the next step on (asks wanted() now); null detaches.
    void attach_taps(std::shared_ptr<tap_sink> sink);

private:
    struct layer {
        const float* attn_norm;                 // [dim]
        const float* ffn_norm;                  // [dim]
        const float* bq = nullptr;              // [q_width] or null (qkv_bias)
        const float* bk = nullptr;              // [kv_width] or null
        const float* bv = nullptr;              // [kv_width] or null
        const float* post_attn_norm = nullptr;  // [dim] or null (post_norms)
        const float* post_ffn_norm = nullptr;   // [dim] or null
        int32_t window = 0;                     // tokens the layer attends to at most; 0: all before
        linear wq, wk, wv, wo, w_gate, w_up, w_down;
        // q/k/v and gate/up as one matrix each (linear::concatenated) where the parts are alike: steps of few
        // tokens (decode) run them as one job. When the weights are copied, the group is what is placed and its
        // parts are views of its rows (linear::rows).
        std::optional<linear> w_qkv, w_gate_up;
        std::optional<mla_block> mla;  // attention_block::mla layers: the MLA block (wq, wk, wv unused)
        std::optional<moe_ffn> moe;    // ffn_block::moe layers: the experts (w_gate, w_up, w_down unused)
        // Left uninitialized (pages are touched only where the cache is written): attention reads only
        // rows written before.
        // With a KV plugin instead: [n_blocks][block_bytes] and [max_seqs][window slot bytes], in kv_memory_.
        uint8_t* kv_blocks = nullptr;
        uint8_t* kv_window = nullptr;
        float* k_pool = nullptr;  // [n_blocks, block_size, n_kv_heads, head_dim] of params.kv_type, in kv_memory_
        float* v_pool = nullptr;  // (uint16_t halves behind the pointer for F16)
                                  // MLA: k_pool holds the latent rows [n_blocks, block_size, kv_lora_rank +
                                  // rope_dim], v_pool is null
    };
    struct scratch {
        std::vector<float> x;                // [T, dim] residual stream
        std::vector<float> h;                // [T, max(dim, q_width)]
        std::vector<float> q;                // [T, n_heads * head_dim]
        std::vector<float> k;                // [T, n_kv_heads * head_dim]
        std::vector<float> v;                // [T, n_kv_heads * head_dim]
        std::vector<float> attn;             // [T, n_heads * head_dim]
        std::vector<float> gate;             // [T, ffn_dim]
        std::vector<float> up;               // [T, ffn_dim]
        std::vector<float> qkv;              // [min(T, k_max_fused_tokens), q_width + 2 * kv_width]
        std::vector<float> gate_up;          // [min(T, k_max_fused_tokens), 2 * ffn_dim]
        std::vector<int32_t> positions;      // [T]
        std::vector<int64_t> seq_ids;        // [T] each token's sequence id (taps)
        std::vector<float> rope_cs;          // [T, rope_dims / 2, (cos, sin)] this step's rotations
        std::vector<int32_t> seq_of;         // [T]
        std::vector<int32_t> out_rows;       // [R] token index of each logits row
        std::vector<float> rows;             // [R, dim]
        std::vector<float> rows_scratch;     // [T, dim] a normed branch output (post norms)
        std::vector<int64_t> out_seq_ids;    // [R] sequence id of each logits row (taps)
        std::vector<int32_t> out_positions;  // [R] position of each logits row (taps)
        std::vector<int32_t> nodes;          // [T] draft node of each token, -1 for a sequence's own (taps)
        std::vector<int32_t> out_nodes;      // [R] draft node of each logits row (taps)
        // Tree attention (steps with a tree of drafts): each token's KV row, the end of the rows every token sees,
        // and the rows past it each one sees (bit j of word w: row mask_base + 64 w + j).
        std::vector<int32_t> kv_rows;    // [T]
        std::vector<int32_t> mask_base;  // [T]
        std::vector<uint64_t> mask;      // [T, mask_words]
        int32_t mask_words = 0;
        bool tree = false;    // some sequence of the step brings a tree: attention takes rows and masks
        bool drafts = false;  // some sequence brings drafts: the taps carry nodes
        void reserve(size_t n_tokens, const llama_hparams& hp);
    };

    cpu_llama() = default;
    status check_batch(const forward_batch& batch) const;
    // The drafts of one step (cpu_llama_trees.cpp): checks n_draft and tree_parents (draft_layout.h).
    status check_drafts(const sequence_step& s) const;
    // Fills the step's nodes, and with a tree the rows, masks and tree positions (tokens t0.. are s's).
    void lay_out_drafts(const sequence_step& s, size_t t0);
    // Sizes the step's tree scratch: mask words for its largest tree, rows and masks of plain tokens.
    void begin_tree_step(const forward_batch& batch, size_t n_tokens);
    status place_weights();
    // The step's sequences' KV window slots (step_slots_), new ones zeroed in every layer.
    status assign_window_slots(const forward_batch& batch);
    // Attention of layer il over the KV cache: the KV plugin's, or the attention op over the built-in pools.
    status attend(int32_t il, size_t n, const float* q, const float* k, const float* v,
                  const std::vector<const int32_t*>& tables);
    status run_layer(int32_t il, size_t n_tokens, const std::vector<const int32_t*>& tables);
    bool wants(tap_point t) const { return (taps_wanted_ & tap_bit(t)) != 0; }
    // Hands rows [n, width] of tap t to the sink when it wants them: the step's tokens, or its logits rows (layer
    // -1). One branch when nobody does.
    status tap(tap_point t, int32_t layer, const float* data, size_t n, size_t width);
    // h·Wqᵀ + bq, h·Wkᵀ + bk, h·Wvᵀ + bv for n tokens; q, k, v point at them ([n, q_width], [n, kv_width] each)
    // afterwards.
    status project_qkv(const layer& l, size_t n, float*& q, float*& k, float*& v);
    // act(h·W_gateᵀ) ⊙ h·W_upᵀ for n tokens; hidden points at it ([n, ffn_dim]) afterwards.
    status ffn_hidden(const layer& l, size_t n, const float*& hidden);
    // The layer's standard attention block: from h (normed x) to a·Woᵀ in s_.h. (An MLA block branches here.)
    status standard_attention(int32_t il, size_t n, const std::vector<const int32_t*>& tables);
    // The layer's dense FFN block: from h (normed x) to f in s_.h.
    status dense_ffn(int32_t il, size_t n);
    // The layer's MoE FFN block (moe_ffn.h): from h (normed x) to f in s_.h.
    status moe_block(int32_t il, size_t n);
    // The layer's MLA attention block (mla_block.h): from h (normed x) to a·Woᵀ in s_.h.
    status mla_attention(int32_t il, size_t n, const std::vector<const int32_t*>& tables);
    // x += the branch output in s_.h, through the post norm first where the architecture has one.
    void add_branch(const float* post_norm, size_t n);
    // The attention features (attention_feature bits) this model's layers need of the attention op.
    uint32_t needed_attention_features() const;
    void fuse_projections();

    llama_weights w_;
    cpu_llama_params params_;
    kv_geometry kv_{};
    std::shared_ptr<cpu::thread_pool> pool_;
    compute_context ctx_;
    const float* output_norm_ = nullptr;
    linear output_;
    std::vector<layer> layers_;
    // The MLA blocks' scratch and the step's RoPE rotations (MLA models).
    std::shared_ptr<mla_workspace> mla_ws_;
    std::shared_ptr<moe_workspace> moe_ws_;  // the MoE layers' scratch (MoE models)
    cpu::huge_page_buffer arena_;            // the builtin kernels' weights when params.copy_weights: one region per
                                             // thread (place_weights)
    kv_layout kv_layout_;
    kv_groups groups_;                             // which block table each layer reads, and its KV memory slot
    std::optional<kv_window_slots> window_slots_;  // with a KV plugin that declares a window
    std::vector<int32_t> step_slots_;              // [sequences of the step] their window slots
    std::vector<int32_t> slots_to_zero_;
    cpu::huge_page_buffer kv_memory_;  // every layer's K and V pools (huge pages: attention reads rows of
                                       // one kv head at a stride, touching a 4 KiB page every row or two)
    scratch s_;
    int32_t n_fused_groups_ = 0;
    std::shared_ptr<tap_sink> taps_;
    uint64_t taps_wanted_ = 0;  // taps_->wanted(), 0 without a sink
};

}  // namespace troupe
