// synth_model: a GGUF with seeded random weights in a named shape and architecture (synth_arch.h: llama, qwen2,
// phi3, gemma2, mixtral, deepseek2), so anyone can test and benchmark without downloading a model (`troupe synth`).
//
// Weights: every matrix element is 0.02 * z with z approximately standard normal (the sum of four
// uniforms, scaled: bounded at +-3.46, like a truncated-normal initialization); norm weights are 1.
// Each row draws from its own generator seeded by (seed, tensor, row), so the file depends on the seed
// only, not on the thread count. Matrices are stored in the requested type; 1-D tensors stay F32, and a
// matrix whose rows are not a multiple of the type's block size falls back to F16.
//
// The llama architecture's tensors (ggml dims, row length first; the others: synth_arch.h):
//   token_embd.weight [dim, n_vocab]      output_norm.weight [dim]      output.weight [dim, n_vocab]
//   blk.N.attn_norm.weight [dim]          blk.N.ffn_norm.weight [dim]
//   blk.N.attn_q.weight [dim, dim]        blk.N.attn_k.weight / attn_v.weight [dim, n_kv_heads * head_dim]
//   blk.N.attn_output.weight [dim, dim]   blk.N.ffn_gate.weight / ffn_up.weight [dim, ffn]
//   blk.N.ffn_down.weight [ffn, dim]
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cli/synth_arch.h"
#include "core/gguf/gguf_file.h"
#include "core/result.h"
#include "kernels/ggml_types.h"

namespace troupe::cli {

// The experts of the shape's mixture-of-experts architectures (mixtral, deepseek2).
struct synth_moe {
    int32_t n_experts = 8;
    int32_t n_used = 2;      // top k
    int32_t expert_ffn = 0;  // units of one expert
};

struct synth_shape {
    std::string_view name;
    int32_t dim;
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t ffn;  // dense FFN (deepseek2: its leading dense layer)
    int32_t n_ctx;
    synth_moe moe{};
    bool experts_only = false;  // a mixture-of-experts shape: only the MoE architectures
};

// "tiny", "110M", "1B", "moe-1B" (case-insensitive lookup).
std::span<const synth_shape> synth_shapes();
const synth_shape* find_synth_shape(std::string_view name);

// f32, f16, q8_0, q4_0, q5_0, q2_k, q3_k, q4_k, q5_k, q6_k, q4_1, w4_g64, w4_g128.
std::optional<ggml_type> parse_synth_type(std::string_view name);

// One row of std_dev * (approximately standard normal) values: the sum of four 16-bit uniforms, scaled (bounded at
// +-3.46 std_dev). The row depends on (seed, tensor, row) only, so rows can be drawn on any thread in any order.
void random_row(uint64_t seed, uint64_t tensor, uint64_t row, float std_dev, float* out, int64_t n);

// general.file_type (llama.cpp's LLAMA_FTYPE) of a model whose matrices are `type` (0, F32, where it has none).
uint32_t gguf_file_type(ggml_type type);

struct synth_params {
    synth_shape shape;
    synth_arch arch = synth_arch::llama;
    ggml_type type = ggml_type::f16;
    uint64_t seed = 1;
    int n_threads = 0;  // 0: all cores
};

struct synth_summary {
    int64_t n_params = 0;
    int64_t n_active_params = 0;  // those a token runs through (the selected experts' only)
    int64_t n_vocab = 0;
    size_t n_bytes = 0;  // file size
};

// Writes the model to out_path with the tokenizer metadata (tokenizer.*) of `vocab`.
result<synth_summary> write_synth_model(const synth_params& params, const gguf::gguf_file& vocab,
                                        const std::string& out_path);

}  // namespace troupe::cli
