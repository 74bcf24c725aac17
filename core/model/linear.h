// linear: one weight matrix ready to multiply, y[n_tokens, n_out] = x[n_tokens, n_in] · Wᵀ.
// A quant plugin takes over the types it claims (e.g. Q8_0, or F32/F16 quantized online at load);
// every other computable type runs on the builtin CPU kernels, with the activation recipe chosen at make
// (kernels.activations: llama.cpp's quantized activations, or float32 activations against exactly dequantized
// weights).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/model/compute_context.h"
#include "core/model/ops.h"
#include "kernels/cpu/matmul.h"

namespace troupe {

class linear {
public:
    linear() = default;
    static result<linear> make(const weight_view& w, quant_op* quant, const std::string& name,
                               cpu::activation_recipe recipe = cpu::activation_recipe::quantized);

    status forward(const float* x, float* y, int64_t n_tokens, const compute_context& ctx) const;

    // The parts (weights that multiply the same input, like q/k/v) as one matrix whose rows are theirs in
    // order, where that costs nothing: every part on the builtin kernels with the same type, recipe, n_in and
    // row stride, their rows — or panels, each part a whole number of panels — back to back in memory (place()
    // in the parts' order lays them out so). One product then is one parallel job instead of several, with
    // longer contiguous pieces per thread and the activations prepared once. A view: valid while the parts are.
    // Empty where the parts do not qualify.
    static std::optional<linear> concatenated(std::span<const linear* const> parts);

    int64_t n_in() const { return w_.n_in; }
    int64_t n_out() const { return w_.n_out; }
    size_t n_bytes() const;  // weight bytes read per product

    // kernels.weights: copy. Bytes the weight takes when placed in memory of the model's own (0 for a weight a
    // plugin took: the plugin owns its memory), and placing it: copies the rows to dst (placed_bytes(),
    // 64-byte aligned) — or packs them into the panels the kernels prefer for the type and recipe
    // (kernels/cpu/q8_panels.h) — reads them from there from now on and releases the file pages they came
    // from (so the weight must point into a read-only file mapping, as gguf_file's tensors do: released
    // anonymous memory would read back as zeros). pool (may be null) splits the packing.
    size_t placed_bytes() const;
    void place(uint8_t* dst, cpu::thread_pool* pool);
    bool packed() const { return panels_ != nullptr; }
    bool by_plugin() const { return prepared_ != nullptr; }
    ggml_type stored_type() const { return w_.type; }
    cpu::activation_recipe recipe() const { return recipe_; }  // of the builtin kernels (unused by a plugin)

private:
    matmul_weight kernel_weight() const;  // what cpu::matmul reads
    bool packs_panels() const;            // place() packs q8 panels
    bool keeps_rows() const;              // place() copies the rows

    weight_view w_{};
    quant_op* quant_ = nullptr;
    cpu::activation_recipe recipe_ = cpu::activation_recipe::quantized;
    std::shared_ptr<const prepared_weight> prepared_;
    const void* panels_ = nullptr;  // the packed form place() wrote, or null
};

}  // namespace troupe
