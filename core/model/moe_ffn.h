// moe_ffn: one Mixture-of-Experts FFN layer (Mixtral, DeepSeek-MoE) on the CPU.
//
//   logits = x · W_routerᵀ                                   [n, E]
//   (experts, w) = route_tokens(logits)                       [n, k] each (moe_router.h)
//   per expert e, over the rows X_e of the tokens routed to it (gathered, token order):
//       Y_e = (silu(X_e · W_gate,eᵀ) ⊙ X_e · W_up,eᵀ) · W_down,eᵀ
//   y[t] = Σ_slot w[t, slot] · Y_{experts[t, slot]}[row of (t, slot)]   (slots in router order)
//   y[t] += shared(x[t])   (SwiGLU FFN of expert_ffn * n_shared units, where the model has shared experts)
//
// Every expert is a row slice of its 3-D tensor made into a `linear` by the caller's callback (the one the graph
// uses: quant plugins, both activation recipes, every weight type). Each expert's products are one parallel job
// over its rows, so a decode step streams only the selected experts' bytes, each thread its share of each (the
// placement of kernels.weights: copy). gate and up of an expert run as one matrix (linear::concatenated) for
// groups of few tokens, as the dense FFN does.
//
// Scratch lives in a moe_workspace that every layer of a model shares (layers run one after another).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/model/compute_context.h"
#include "core/model/linear.h"
#include "core/model/moe_params.h"
#include "core/model/moe_router.h"

namespace troupe {

// Makes the linear of weight w (named for errors), as the graph makes its own.
using make_linear_fn = std::function<status(const weight_view& w, const std::string& name, linear& out)>;

struct moe_workspace {
    std::vector<float> logits;     // [n, n_experts]
    std::vector<int32_t> experts;  // [n, n_used]
    std::vector<float> weights;    // [n, n_used]
    expert_groups groups;          // rows of the (token, slot) pairs in expert order
    std::vector<float> xg;         // [n * n_used, dim] the gathered inputs
    std::vector<float> gate;       // [max(n * n_used, n), max(expert_ffn, shared_ffn)]
    std::vector<float> up;         // [max(n * n_used, n), max(expert_ffn, shared_ffn)]
    std::vector<float> gate_up;    // [k_max_fused_tokens, 2 max(expert_ffn, shared_ffn)]
    std::vector<float> yg;         // [max(n * n_used, n), dim] the experts' outputs, gathered order
};

class moe_ffn {
public:
    // Groups of at most this many tokens run an expert's gate and up as one matrix.
    static constexpr size_t k_max_fused_tokens = 16;

    moe_ffn() = default;
    // The MoE FFN of one layer (name: its tensors' prefix, "blk.3.", for errors). workspace: shared by the model's
    // layers (null: one of its own).
    static result<moe_ffn> make(const moe_params& p, const moe_layer_weights& w, int32_t dim, const std::string& name,
                                const make_linear_fn& make_linear, std::shared_ptr<moe_workspace> workspace);

    // y = the layer's FFN output for the normed input x (the residual add is the caller's).   x, y: [n, dim]
    status forward(const float* x, float* y, size_t n, const compute_context& ctx);

    // Weight bytes one token reads: the router, n_used experts and the shared experts (for the bandwidth bound).
    size_t active_bytes_per_token() const;
    // Multiply-adds of the weights one token runs through (the same matrices), or of those macs_of counts: its
    // count for each linear (default: all of its n_in * n_out).
    int64_t active_macs_per_token(const std::function<int64_t(const linear&)>& macs_of = {}) const;
    // Every weight in the order a step multiplies them (router; per expert gate/up, fused where it is, and down;
    // shared gate/up, down): what kernels.weights: copy places. Call parts_from_groups() after placing them.
    std::vector<linear*> weights_in_step_order();
    // After placement: the fused groups' parts become views of the group's placed rows again.
    void parts_from_groups();
    // The routing of the last forward() (tests): [n, n_used] experts and weights.
    const std::vector<int32_t>& last_experts() const { return ws_->experts; }
    const std::vector<float>& last_weights() const { return ws_->weights; }
    const moe_params& params() const { return p_; }

private:
    struct expert {
        linear gate, up, down;          // [ffn rows, dim], [ffn rows, dim], [dim rows, ffn]
        std::optional<linear> gate_up;  // gate and up as one matrix, where they qualify
    };
    void reserve(size_t n);
    // SwiGLU FFN of one expert over n rows: y = (silu(x·Gᵀ) ⊙ x·Uᵀ)·Dᵀ.   x, y: [n, dim]
    status run_expert(const expert& e, int32_t ffn, const float* x, float* y, size_t n, const compute_context& ctx);

    moe_params p_;
    int32_t dim_ = 0;
    linear router_;                      // [n_experts rows, dim]
    const float* probs_bias_ = nullptr;  // [n_experts] or null
    std::vector<expert> experts_;        // [n_experts]
    std::optional<expert> shared_;
    std::shared_ptr<moe_workspace> ws_;
};

}  // namespace troupe
