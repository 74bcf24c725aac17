// plugin_tap_sink: a plugin instance's troupe_tap_ops (plugins/include/troupe/taps.h) as the graph's tap_sink
// (core/model/tap_sink.h). wanted() is asked once, at creation; each observation crosses as a troupe_tap_data
// (CPU backend, host memory). A failing observe fails the step with "plugin <label>: observe failed: <its message>".
#pragma once

#include <memory>
#include <vector>

#include "core/model/tap_sink.h"
#include "core/plugin_host/plugin_instance.h"
#include "core/result.h"

namespace troupe {

class plugin_tap_sink final : public tap_sink {
public:
    // An error when the plugin has no taps table.
    static result<std::shared_ptr<plugin_tap_sink>> create(std::shared_ptr<plugin_instance> instance);

    uint64_t wanted() const override { return wanted_; }
    status observe(const tap_data& data) override;
    // The plugin's troupe_tap_ops::device_data (version 2): device pointers on a GPU, else host copies.
    bool device_data() const override { return device_data_; }

private:
    plugin_tap_sink(std::shared_ptr<plugin_instance> instance, uint64_t wanted, bool device_data)
        : instance_(std::move(instance)), wanted_(wanted), device_data_(device_data) {}
    std::shared_ptr<plugin_instance> instance_;
    uint64_t wanted_;
    bool device_data_;
    std::vector<int32_t> own_nodes_;  // [n_rows] all -1, for steps without drafts
};

}  // namespace troupe
