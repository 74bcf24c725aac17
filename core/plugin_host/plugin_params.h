// A plugin's YAML `params` sub-tree in the form that crosses the C ABI: flat (dotted key, value string)
// pairs plus the sub-tree as YAML text.
//
//   params: {max_draft: 4, window: {size: 8}, ids: [3, 5]}
//   -> ("max_draft", "4"), ("window.size", "8"), ("ids.0", "3"), ("ids.1", "5")
//
// A null or absent node gives no pairs and the text "{}". The pairs own their strings; view() points
// into them, so keep the flat_params alive while the view is in use.
#pragma once

#include <troupe/plugin.h>

#include <string>
#include <utility>
#include <vector>

namespace YAML {
class Node;
}

namespace troupe {

class flat_params {
public:
    static flat_params from_yaml(const YAML::Node& params);

    const std::vector<std::pair<std::string, std::string>>& items() const { return items_; }
    const std::string& yaml() const { return yaml_; }
    // The C view, valid until this object is modified, moved or destroyed, or view() is called again. `model`:
    // troupe_plugin_params.model (null: made without a model).
    troupe_plugin_params view(int32_t backend, const troupe_model_services* model = nullptr) const;

private:
    std::vector<std::pair<std::string, std::string>> items_;
    mutable std::vector<troupe_param> c_items_;  // [items_.size()] pointing into items_, built by view()
    std::string yaml_;
};

}  // namespace troupe
