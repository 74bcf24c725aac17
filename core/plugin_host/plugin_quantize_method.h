// plugin_quantize_method: a quant plugin's offline quantization table (troupe_quantize_ops, and its taps when it
// has them) as the quantize_method `troupe quantize` drives (core/quantize/quantize_method.h). Failures read
// "plugin quant/<name>: quantize_group failed: <the plugin's message>".
#pragma once

#include <memory>

#include "core/plugin_host/plugin_instance.h"
#include "core/plugin_host/plugin_tap_sink.h"
#include "core/quantize/quantize_method.h"

namespace troupe {

class plugin_quantize_method final : public quantize_method {
public:
    // An error when the plugin has no quantize table (a runtime-only quant plugin).
    static result<std::unique_ptr<plugin_quantize_method>> create(std::shared_ptr<plugin_instance> instance);

    std::string name() const override;
    uint64_t wanted() const override { return taps_ ? taps_->wanted() : 0; }
    status observe(const tap_data& data) override;
    bool can_write(ggml_type type, int64_t n_in) override;
    status quantize_group(const linear_group& group, const parallel_for_fn& parallel_for) override;

private:
    explicit plugin_quantize_method(std::shared_ptr<plugin_instance> instance) : instance_(std::move(instance)) {}
    std::shared_ptr<plugin_instance> instance_;
    std::shared_ptr<plugin_tap_sink> taps_;  // null: the method calibrates from nothing
};

}  // namespace troupe
