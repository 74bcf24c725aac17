#include "core/model/quant_chain.h"

#include "core/result.h"

namespace troupe {
namespace {

// A weight prepared by ops_[op] of a chain, wrapping that op's prepared weight.
class chained_weight final : public prepared_weight {
public:
    chained_weight(const quant_op* op, std::shared_ptr<const prepared_weight> inner)
        : op_(op), inner_(std::move(inner)) {}
    size_t n_bytes() const override { return inner_->n_bytes(); }
    const quant_op* op() const { return op_; }
    const prepared_weight& inner() const { return *inner_; }

private:
    const quant_op* op_;
    std::shared_ptr<const prepared_weight> inner_;
};

}  // namespace

quant_chain::quant_chain(std::vector<std::shared_ptr<quant_op>> ops) : ops_(std::move(ops)) {
    TROUPE_ASSERT(!ops_.empty(), "quant_chain needs at least one quant op");
    for (const auto& op : ops_) TROUPE_ASSERT(op != nullptr, "quant_chain got a null quant op");
}

std::string quant_chain::name() const {
    std::string n;
    for (const auto& op : ops_) n += (n.empty() ? "" : " + ") + op->name();
    return n;
}

bool quant_chain::claims(ggml_type type) const {
    for (const auto& op : ops_) {
        if (op->claims(type)) return true;
    }
    return false;
}

result<std::shared_ptr<const prepared_weight>> quant_chain::prepare(const weight_view& w) {
    for (const auto& op : ops_) {
        if (!op->claims(w.type)) continue;
        auto prepared = op->prepare(w);
        if (!prepared.ok()) return make_error(op->name() + ": " + prepared.message());
        return std::shared_ptr<const prepared_weight>(std::make_shared<chained_weight>(op.get(), std::move(*prepared)));
    }
    return make_error("no plugin of " + name() + " takes " + std::string(traits(w.type).name) + " weights");
}

result<std::pair<quant_op*, const prepared_weight*>> quant_chain::owner_of(const prepared_weight& w) const {
    const auto* chained = dynamic_cast<const chained_weight*>(&w);
    if (chained == nullptr) return make_error(name() + ": matmul got a weight prepared by another quant op");
    for (const auto& op : ops_) {
        if (op.get() == chained->op()) return std::pair<quant_op*, const prepared_weight*>{op.get(), &chained->inner()};
    }
    return make_error(name() + ": matmul got a weight prepared by another quant chain");
}

status quant_chain::matmul(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                           const parallel_for_fn& parallel_for) {
    auto owner = owner_of(w);
    if (!owner.ok()) return owner.err();
    return owner->first->matmul(*owner->second, x, y, n_tokens, parallel_for);
}

status quant_chain::matmul_on(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                              const compute_context& ctx) {
    auto owner = owner_of(w);
    if (!owner.ok()) return owner.err();
    return owner->first->matmul_on(*owner->second, x, y, n_tokens, ctx);
}

}  // namespace troupe
