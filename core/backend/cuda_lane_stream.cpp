#include "core/backend/cuda_lane_stream.h"

namespace troupe {

bool cuda_has_lane_events(const cuda_library& lib) {
    const troupe_cuda_ops& ops = lib.ops();
    return TROUPE_CUDA_OPS_HAS(&ops, lane_record) && TROUPE_CUDA_OPS_HAS(&ops, lane_wait) &&
           TROUPE_CUDA_OPS_HAS(&ops, lane_synchronize) && TROUPE_CUDA_OPS_HAS(&ops, event_destroy) &&
           TROUPE_CUDA_OPS_HAS(&ops, context_set_explicit_order) && TROUPE_CUDA_OPS_HAS(&ops, model_forward_fenced);
}

std::shared_ptr<cuda_lane_stream> cuda_lane_stream::create(std::shared_ptr<const cuda_library> lib,
                                                           troupe_cuda_context* ctx, int32_t lane, std::string name) {
    if (!lib || !ctx || !cuda_has_lane_events(*lib)) return nullptr;
    return std::shared_ptr<cuda_lane_stream>(new cuda_lane_stream(std::move(lib), ctx, lane, std::move(name)));
}

void* cuda_lane_stream::native() const {
    return lib_->ops().context_stream(ctx_, lane_);
}

result<std::shared_ptr<const device_event>> cuda_lane_stream::record() {
    troupe_cuda_event* e = nullptr;
    if (const char* m = lib_->ops().lane_record(ctx_, lane_, &e)) return make_error(name_ + ": " + m);
    return std::shared_ptr<const device_event>(std::make_shared<cuda_lane_event>(lib_, e));
}

status cuda_lane_stream::wait(const device_event& e) {
    const auto* ce = dynamic_cast<const cuda_lane_event*>(&e);
    if (ce == nullptr) return make_error(name_ + ": asked to wait for an event that is not a CUDA lane's");
    if (const char* m = lib_->ops().lane_wait(ctx_, lane_, ce->handle())) return make_error(name_ + ": " + m);
    return {};
}

status cuda_lane_stream::synchronize() {
    if (const char* m = lib_->ops().lane_synchronize(ctx_, lane_)) return make_error(name_ + ": " + m);
    return {};
}

}  // namespace troupe
