#include "core/plugin_host/plugin_quantize_method.h"

#include <vector>

#include "core/plugin_host/parallel_bridge.h"

namespace troupe {

result<std::unique_ptr<plugin_quantize_method>> plugin_quantize_method::create(
    std::shared_ptr<plugin_instance> instance) {
    if (instance->quantize_ops() == nullptr) {
        return make_error("plugin " + instance->label() +
                          " is no offline quantization method (its descriptor has no quantize op table)");
    }
    std::unique_ptr<plugin_quantize_method> m(new plugin_quantize_method(instance));
    if (instance->tap_ops() != nullptr) {
        auto taps = plugin_tap_sink::create(instance);
        if (!taps.ok()) return taps.err();
        m->taps_ = std::move(*taps);
    }
    return m;
}

std::string plugin_quantize_method::name() const {
    return instance_->library().info().name;
}

status plugin_quantize_method::observe(const tap_data& data) {
    if (!taps_) return make_error("plugin " + instance_->label() + " observes no taps");
    return taps_->observe(data);
}

bool plugin_quantize_method::can_write(ggml_type type, int64_t n_in) {
    return instance_->quantize_ops()->can_write(instance_->handle(), static_cast<uint32_t>(type), n_in) != 0;
}

status plugin_quantize_method::quantize_group(const linear_group& group, const parallel_for_fn& parallel_for) {
    std::vector<troupe_quantize_weight> weights(group.weights.size());
    for (size_t i = 0; i < weights.size(); ++i) {
        const quantize_weight& w = group.weights[i];
        troupe_quantize_weight& c = weights[i];
        c.struct_size = sizeof(troupe_quantize_weight);
        c.version = TROUPE_QUANTIZE_WEIGHT_VERSION;
        c.name = w.name.c_str();
        c.data = w.data;
        c.n_out = w.n_out;
        c.type = static_cast<uint32_t>(w.type);
        c.out = w.out;
    }
    troupe_quantize_group c{};
    c.struct_size = sizeof(troupe_quantize_group);
    c.version = TROUPE_QUANTIZE_GROUP_VERSION;
    c.layer = group.layer;
    c.input_tap = static_cast<int32_t>(group.input_tap);
    c.n_in = group.n_in;
    c.n_weights = static_cast<int32_t>(weights.size());
    c.weights = weights.data();
    c.input_scales = group.input_scales;
    const parallel_bridge bridge(parallel_for);
    const int32_t rc = instance_->quantize_ops()->quantize_group(instance_->handle(), &c, bridge.c());
    if (rc != TROUPE_OK) return instance_->op_error("quantize_group", rc);
    return {};
}

}  // namespace troupe
