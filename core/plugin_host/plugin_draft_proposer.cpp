#include "core/plugin_host/plugin_draft_proposer.h"

namespace troupe {

plugin_draft_proposer::plugin_draft_proposer(std::shared_ptr<plugin_instance> instance)
    : instance_(std::move(instance)) {}

std::string plugin_draft_proposer::name() const {
    return instance_->label();
}

result<std::vector<int32_t>> plugin_draft_proposer::propose(std::span<const int32_t> context, int32_t max_draft) {
    if (max_draft <= 0) return std::vector<int32_t>{};
    std::vector<int32_t> out(static_cast<size_t>(max_draft));
    const int32_t n = instance_->descriptor().spec->propose(
        instance_->handle(), context.data(), static_cast<int64_t>(context.size()), max_draft, out.data());
    if (n < 0) return instance_->op_error("propose", -n);
    if (n > max_draft) {
        return make_error("plugin " + instance_->label() + ": propose returned " + std::to_string(n) +
                          " tokens, more than the " + std::to_string(max_draft) + " asked for");
    }
    out.resize(static_cast<size_t>(n));
    return out;
}

}  // namespace troupe
