// float_llama: a llama model's weights as float32 copies (any stored type dequantized), row-major as in the file:
// the frozen parts of a distillation target (embeddings, output norm and matrix, the last layer) and the start of a
// drafter grown from an existing model (--draft-from).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/gguf/gguf_file.h"
#include "core/model/llama_hparams.h"
#include "core/result.h"

namespace troupe::train {

struct float_layer {
    std::vector<float> attn_norm;  // [dim]
    std::vector<float> wq;         // [q_width, dim]
    std::vector<float> wk;         // [kv_width, dim]
    std::vector<float> wv;         // [kv_width, dim]
    std::vector<float> wo;         // [dim, q_width]
    std::vector<float> ffn_norm;   // [dim]
    std::vector<float> w_gate;     // [ffn_dim, dim]
    std::vector<float> w_up;       // [ffn_dim, dim]
    std::vector<float> w_down;     // [dim, ffn_dim]
};

struct float_llama {
    std::shared_ptr<const gguf::gguf_file> file;
    llama_hparams hp;
    std::vector<float> token_embd;    // [n_vocab, dim]
    std::vector<float> output_norm;   // [dim]
    std::vector<float> output;        // [n_vocab, dim] (a copy of token_embd when the file ties them)
    std::vector<float_layer> layers;  // all of them, or only the last (layers_wanted::last)
};

enum class layers_wanted { all, last };

// Binds the model (core/model/llama_weights.h: names, shapes, types checked) and copies what is asked as float32.
result<float_llama> read_float_llama(std::shared_ptr<const gguf::gguf_file> file, layers_wanted which);

}  // namespace troupe::train
