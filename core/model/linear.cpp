#include "core/model/linear.h"

namespace troupe {

result<linear> linear::make(const weight_view& w, quant_op* quant, const std::string& name,
                            cpu::activation_recipe recipe) {
    linear l;
    l.w_ = w;
    l.recipe_ = recipe;
    if (quant && quant->claims(w.type)) {
        auto prepared = quant->prepare(w);
        if (!prepared.ok()) return make_error(name + ": quant plugin " + quant->name() + ": " + prepared.message());
        l.quant_ = quant;
        l.prepared_ = std::move(*prepared);
        return l;
    }
    if (!matmul_supports(w.type)) {
        return make_error(name + ": no kernel for weight type " + std::string(traits(w.type).name) +
                          (quant ? "" : " (configure a quant plugin that handles it)"));
    }
    return l;
}

size_t linear::n_bytes() const {
    return prepared_ ? prepared_->n_bytes() : w_.row_stride * w_.n_out;
}

status linear::forward(const float* x, float* y, int64_t n_tokens, const compute_context& ctx) const {
    if (prepared_) return quant_->matmul(*prepared_, x, y, n_tokens, ctx.parallel_for);
    const matmul_weight w{w_.type, w_.data, w_.n_in, w_.n_out, w_.row_stride};
    cpu::matmul(w, x, y, n_tokens, *ctx.pool, recipe_);
    return {};
}

}  // namespace troupe
