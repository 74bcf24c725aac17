#include "core/plugin_host/plugin_quant_op.h"

#include <algorithm>

#include "core/plugin_host/parallel_bridge.h"

namespace troupe {
namespace {

class plugin_prepared_weight final : public prepared_weight {
public:
    plugin_prepared_weight(std::shared_ptr<plugin_instance> instance, troupe_prepared_weight* handle)
        : instance_(std::move(instance)), handle_(handle) {}
    ~plugin_prepared_weight() override { instance_->descriptor().quant->release(instance_->handle(), handle_); }
    plugin_prepared_weight(const plugin_prepared_weight&) = delete;
    plugin_prepared_weight& operator=(const plugin_prepared_weight&) = delete;

    size_t n_bytes() const override {
        const troupe_quant_ops& ops = *instance_->descriptor().quant;
        return ops.prepared_bytes != nullptr ? ops.prepared_bytes(instance_->handle(), handle_) : 0;
    }
    // troupe_quant_ops version 2: the plugin lets the host place the weight's rows (one region per thread).
    int64_t placement_rows() const override {
        const troupe_quant_ops& ops = *instance_->descriptor().quant;
        if (!TROUPE_HAS_FIELD(&ops, troupe_quant_ops, place) || ops.placement_rows == nullptr ||
            ops.placed_bytes == nullptr || ops.place == nullptr) {
            return 0;
        }
        return std::max<int64_t>(0, ops.placement_rows(instance_->handle(), handle_));
    }
    size_t placed_bytes(int64_t r0, int64_t r1) const override {
        if (placement_rows() == 0) return 0;
        return instance_->descriptor().quant->placed_bytes(instance_->handle(), handle_, r0, r1);
    }
    status place(std::span<const int64_t> bounds, std::span<uint8_t* const> dsts) const override {
        const int64_t rows = placement_rows();
        if (rows == 0) return make_error("plugin " + instance_->label() + ": this weight cannot be placed by the host");
        if (bounds.size() != dsts.size() + 1) {
            return make_error("plugin " + instance_->label() + ": place got " + std::to_string(bounds.size()) +
                              " shard bounds for " + std::to_string(dsts.size()) + " shards");
        }
        troupe_placement p{};
        p.struct_size = sizeof(troupe_placement);
        p.version = TROUPE_PLACEMENT_VERSION;
        p.n_shards = static_cast<int32_t>(dsts.size());
        p.bounds = bounds.data();
        p.dsts = dsts.data();
        const int32_t rc = instance_->descriptor().quant->place(instance_->handle(), handle_, &p);
        if (rc != TROUPE_OK) return instance_->op_error("place", rc);
        return status::success();
    }
    const plugin_instance* owner() const { return instance_.get(); }
    const troupe_prepared_weight* handle() const { return handle_; }

private:
    std::shared_ptr<plugin_instance> instance_;
    troupe_prepared_weight* handle_;
};

}  // namespace

plugin_quant_op::plugin_quant_op(std::shared_ptr<plugin_instance> instance) : instance_(std::move(instance)) {}

std::string plugin_quant_op::name() const {
    return instance_->label();
}

bool plugin_quant_op::claims(ggml_type type) const {
    return instance_->descriptor().quant->claims(instance_->handle(), static_cast<uint32_t>(type)) != 0;
}

result<std::shared_ptr<const prepared_weight>> plugin_quant_op::prepare(const weight_view& w) {
    troupe_weight c{};
    c.struct_size = sizeof(troupe_weight);
    c.version = TROUPE_WEIGHT_VERSION;
    c.type = static_cast<uint32_t>(w.type);
    c.data = w.data;
    c.n_in = w.n_in;
    c.n_out = w.n_out;
    c.row_stride = w.row_stride;
    troupe_prepared_weight* handle = nullptr;
    const int32_t rc = instance_->descriptor().quant->prepare(instance_->handle(), &c, &handle);
    if (rc != TROUPE_OK || handle == nullptr) {
        if (handle != nullptr) instance_->descriptor().quant->release(instance_->handle(), handle);
        return instance_->op_error("prepare", rc == TROUPE_OK ? TROUPE_ERR_INTERNAL : rc);
    }
    return std::shared_ptr<const prepared_weight>(std::make_shared<plugin_prepared_weight>(instance_, handle));
}

status plugin_quant_op::matmul(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                               const parallel_for_fn& parallel_for) {
    return run_matmul(w, x, y, n_tokens, parallel_bridge(parallel_for));
}

status plugin_quant_op::matmul_on(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                                  const compute_context& ctx) {
    return run_matmul(w, x, y, n_tokens, parallel_bridge(ctx.parallel_for, ctx.pool));
}

status plugin_quant_op::matmul_on_stream(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                                         void* stream) {
    return run_matmul(w, x, y, n_tokens, parallel_bridge(plugin_backend::cuda, stream));
}

status plugin_quant_op::run_matmul(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                                   const parallel_bridge& bridge) {
    const auto* pw = dynamic_cast<const plugin_prepared_weight*>(&w);
    if (pw == nullptr || pw->owner() != instance_.get()) {
        return make_error("plugin " + instance_->label() + ": matmul got a weight prepared by another quant op");
    }
    const int32_t rc =
        instance_->descriptor().quant->matmul(instance_->handle(), pw->handle(), x, y, n_tokens, bridge.c());
    if (rc != TROUPE_OK) return instance_->op_error("matmul", rc);
    return status::success();
}

}  // namespace troupe
