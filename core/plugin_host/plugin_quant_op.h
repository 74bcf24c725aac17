// quant_op (core/model/ops.h) backed by a quant plugin's op table. Prepared weights hold the instance
// (and so the library) alive and are released through the plugin when dropped.
#pragma once

#include <memory>
#include <string>

#include "core/model/compute_context.h"
#include "core/model/ops.h"
#include "core/plugin_host/parallel_bridge.h"
#include "core/plugin_host/plugin_instance.h"

namespace troupe {

class plugin_quant_op final : public quant_op {
public:
    explicit plugin_quant_op(std::shared_ptr<plugin_instance> instance);
    std::string name() const override;  // "quant/q8"
    bool claims(ggml_type type) const override;
    // The weight's data must stay valid and unchanged while the prepared weight lives (a plugin may use
    // it in place, e.g. Q8_0 tensors of a mapped GGUF file).
    result<std::shared_ptr<const prepared_weight>> prepare(const weight_view& w) override;
    // Fails (no crash) for a weight prepared by another quant op.
    status matmul(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                  const parallel_for_fn& parallel_for) override;
    // With ctx.pool the plugin also gets parallel_ranges (troupe_parallel version 3).
    status matmul_on(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                     const compute_context& ctx) override;
    // The CUDA graph's call: troupe_parallel with backend cuda and the lane's stream (an instance made for cuda).
    status matmul_on_stream(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                            void* stream) override;

private:
    status run_matmul(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                      const parallel_bridge& bridge);

    std::shared_ptr<plugin_instance> instance_;
};

}  // namespace troupe
