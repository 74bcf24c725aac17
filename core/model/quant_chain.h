// quant_chain: several quant ops as one (plugins.quant as a list). Each weight goes to the first op that claims
// its type; its prepared weight remembers that op, and matmul hands the product to it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/model/compute_context.h"
#include "core/model/ops.h"

namespace troupe {

class quant_chain final : public quant_op {
public:
    // ops: in order of preference, at least one, none null.
    explicit quant_chain(std::vector<std::shared_ptr<quant_op>> ops);

    std::string name() const override;  // the ops' names joined by " + ": "quant/q8 + quant/w4a16"
    bool claims(ggml_type type) const override;
    result<std::shared_ptr<const prepared_weight>> prepare(const weight_view& w) override;
    // Fails (no crash) for a weight this chain did not prepare.
    status matmul(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                  const parallel_for_fn& parallel_for) override;
    status matmul_on(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                     const compute_context& ctx) override;

private:
    // The op that prepared w and the weight it made, or an error.
    result<std::pair<quant_op*, const prepared_weight*>> owner_of(const prepared_weight& w) const;

    std::vector<std::shared_ptr<quant_op>> ops_;
};

}  // namespace troupe
