// llama_hparams: the shape of a Llama-family model, read from GGUF metadata ("<arch>.*" keys).
#pragma once

#include <cstdint>
#include <string>

#include "core/gguf/gguf_file.h"
#include "core/result.h"

namespace troupe {

enum class rope_mode { normal, neox };  // normal: rotate adjacent pairs (x0,x1); neox: halves (x_i, x_{i+d/2})

struct llama_hparams {
    std::string architecture;  // "llama"
    int32_t n_vocab = 0;
    int32_t n_ctx = 0;  // training context
    int32_t dim = 0;
    int32_t n_layers = 0;
    int32_t n_heads = 0;
    int32_t n_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t ffn_dim = 0;
    float rms_eps = 1e-5f;
    float rope_base = 10000.0f;
    float rope_scale = 1.0f;  // positions are multiplied by this (linear scaling: 1 / factor)
    int32_t rope_dims = 0;    // dimensions rotated per head (usually head_dim)
    rope_mode rope = rope_mode::normal;

    int32_t q_width() const { return n_heads * head_dim; }
    int32_t kv_width() const { return n_kv_heads * head_dim; }
};

// Architectures troupe runs, for error messages.
inline constexpr const char* supported_architectures = "llama, mistral";

// Reads and checks the hyper-parameters; errors name the file and the key.
result<llama_hparams> read_llama_hparams(const gguf::gguf_file& file);

}  // namespace troupe
