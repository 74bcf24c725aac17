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
#include <vector>

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
    // order: every part on the builtin kernels with the same type, recipe, n_in and row stride, and where the
    // parts have panels each part but the last a whole number of panels. Its rows stay where the parts' are (a
    // weight in pieces, matmul_weight::pieces, merged where they touch), so one product is one parallel job
    // instead of several and the activations are prepared once. A view: valid while the parts' memory is. Empty
    // where the parts do not qualify.
    static std::optional<linear> concatenated(std::span<const linear* const> parts);
    // Rows [r0, r1) as a weight of their own (a view, like concatenated's); with panels r0 must start a panel.
    linear rows(int64_t r0, int64_t r1) const;

    int64_t n_in() const { return w_.n_in; }
    int64_t n_out() const { return w_.n_out; }
    size_t n_bytes() const;  // weight bytes read per product

    // kernels.weights: copy. Shards start at multiples of this many rows: a panel's for the builtin kernels, what
    // the plugin says for a weight a plugin took (0: the plugin keeps its own memory, placed_bytes is 0).
    int64_t placement_rows() const;
    // Bytes rows [r0, r1) take when placed in memory of the model's own (a multiple of 64): their rows, or the panels
    // the kernels prefer for the type and recipe (kernels/cpu/weight_panels.h), or a plugin's prepared rows.
    size_t placed_bytes(int64_t r0, int64_t r1) const;
    // Places the weight in shards: rows [bounds[i], bounds[i + 1]) are copied (or packed into panels) to dsts[i]
    // (placed_bytes of them, 64-byte aligned) and read there from now on, as pieces; the file pages they came from
    // are released (so the rows must lie in a read-only file mapping, as gguf_file's tensors do: released
    // anonymous memory would read back as zeros). A plugin's weight: the plugin moves its prepared rows there (and
    // may refuse). bounds run from 0 to n_out at multiples of placement_rows(). pool (may be null) splits the packing.
    status place(std::span<const int64_t> bounds, std::span<uint8_t* const> dsts, cpu::thread_pool* pool);
    bool packed() const;  // the kernels read panels
    bool by_plugin() const { return prepared_ != nullptr; }
    ggml_type stored_type() const { return w_.type; }
    cpu::activation_recipe recipe() const { return recipe_; }  // of the builtin kernels (unused by a plugin)

private:
    matmul_weight kernel_weight() const;  // what cpu::matmul reads
    bool packs_panels() const;            // place() packs q8 panels
    // The weight's storage as pieces (one piece when it has none of its own).
    std::vector<weight_piece> storage() const;
    // Sets the pieces, merging neighbours whose rows (and panels) continue each other; one left means none.
    void set_pieces(std::vector<weight_piece> pieces);

    weight_view w_{};
    quant_op* quant_ = nullptr;
    cpu::activation_recipe recipe_ = cpu::activation_recipe::quantized;
    std::shared_ptr<const prepared_weight> prepared_;
    const void* panels_ = nullptr;                     // the packed form of the whole weight, or null
    panel_codes panel_codes_ = panel_codes::plus_128;  // of the panels (the form place() packed them in)
    std::vector<weight_piece> pieces_;  // where the rows are stored in several places (then w_.data, panels_ unused)
};

}  // namespace troupe
