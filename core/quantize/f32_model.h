// f32_model: a Llama-family model's linears and norms as float32 in memory, for `troupe quantize`: calibration runs
// a float32 cpu_llama over them (weights() are views into these copies), AWQ scales are folded into them, and the
// method quantizes from them. A quantized file is dequantized exactly (kernels/ref); token_embd stays the file's
// (its rows are only looked up, and it keeps its type in the output).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/gguf/gguf_file.h"
#include "core/model/llama_weights.h"
#include "core/result.h"

namespace troupe {

class f32_model {
public:
    static result<f32_model> load(std::shared_ptr<const gguf::gguf_file> file);
    f32_model(f32_model&&) = default;  // the copies' buffers move with their map nodes: the views stay valid
    f32_model(const f32_model&) = delete;
    f32_model& operator=(const f32_model&) = delete;

    const gguf::gguf_file& file() const { return *weights_.file; }
    const llama_hparams& hparams() const { return weights_.hp; }
    bool tied_output() const { return weights_.tied_output; }
    // Every linear (n_out x n_in, rows contiguous) and norm by its GGUF name; null for another name.
    float* tensor(const std::string& name);
    const float* tensor(const std::string& name) const;
    bool has(const std::string& name) const { return tensors_.count(name) != 0; }
    // The model as cpu_llama binds it, with every linear and norm viewing the copies (F32). Valid while this lives
    // (and the copies are not moved).
    const llama_weights& weights() const { return weights_; }

private:
    f32_model() = default;
    std::map<std::string, std::vector<float>> tensors_;
    llama_weights weights_;
};

}  // namespace troupe
