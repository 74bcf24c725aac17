// synth_arch: what `troupe synth --arch` writes for each architecture: its GGUF keys and its tensors, at a shape.
//
//   arch      | general.architecture | differences from llama (keys "<arch>.*", tensors per layer)
//   ----------+----------------------+---------------------------------------------------------------------------
//   llama     | llama                | (attn_q/k/v/output, ffn_gate/up/down, separate output.weight)
//   qwen2     | qwen2                | attn_{q,k,v}.bias F32; RoPE base 1e6 (NeoX by architecture); tied output
//   phi3      | phi3                 | attn_qkv (q, k, v rows); ffn_up of 2 ffn rows (gate, then up), no ffn_gate;
//             |                      | attention.sliding_window = context
//   gemma2    | gemma2               | post_attention_norm, post_ffw_norm; attention.key_length/value_length;
//             |                      | attn_logit_softcapping 50, final_logit_softcapping 30, sliding_window 4096;
//             |                      | tied output (GeGLU, sqrt(dim) embedding scale by architecture)
//   mixtral   | llama                | expert_count / expert_used_count; ffn_gate_inp, ffn_{gate,up,down}_exps
//             |                      | (3-D: [dim, expert_ffn, E], [expert_ffn, dim, E]); feed_forward_length is
//             |                      | the expert's; RoPE base 1e6
//   deepseek2 | deepseek2            | MLA with q LoRA: attn_q_a, attn_q_a_norm, attn_q_b, attn_kv_a_mqa,
//             |                      | attn_kv_a_norm, attn_kv_b (q/k head = head_dim without RoPE + head_dim / 2
//             |                      | with, value head = head_dim, kv LoRA rank 4 head_dim, q LoRA rank dim / 2);
//             |                      | layer 0 dense, the others MoE (softmax, top k not renormalised, scale 1)
//             |                      | with one shared expert (ffn_{gate,up,down}_shexp)
//
// Matrices are random (synth_model.h); norm weights 1; biases small random values, F32; routers F16.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/gguf/gguf_writer.h"

namespace troupe::cli {

struct synth_shape;

enum class synth_arch { llama, qwen2, phi3, gemma2, mixtral, deepseek2 };

// "llama", "qwen2", "phi3", "gemma2", "mixtral", "deepseek2".
std::optional<synth_arch> parse_synth_arch(std::string_view name);
std::string_view synth_arch_name(synth_arch a);
std::string synth_arch_list();  // "llama, qwen2, ..." for messages
bool synth_arch_has_experts(synth_arch a);

struct synth_tensor {
    // router: a matrix kept in F16 (F32 in an F32 model) whatever the type, as llama.cpp's quantize keeps
    // ffn_gate_inp.
    enum class kind { matrix, router, norm, bias };
    std::string name;
    std::vector<int64_t> dims;  // ggml order: row length first; matrices 2-D, or 3-D for stacked experts
    kind what;
};

// Sets the architecture's keys (general.architecture and "<arch>.*", not the tokenizer's) in w and returns the
// tensors in file order.
std::vector<synth_tensor> plan_synth_arch(synth_arch a, const synth_shape& s, int64_t n_vocab, gguf::gguf_writer& w);

}  // namespace troupe::cli
