#include "core/plugin_host/plugin_params.h"

#include <yaml-cpp/yaml.h>

namespace troupe {
namespace {

void flatten(const YAML::Node& node, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
    switch (node.Type()) {
        case YAML::NodeType::Map:
            for (const auto& kv : node) {
                const std::string key = kv.first.as<std::string>();
                flatten(kv.second, prefix.empty() ? key : prefix + "." + key, out);
            }
            return;
        case YAML::NodeType::Sequence:
            for (size_t i = 0; i < node.size(); ++i) {
                flatten(node[i], prefix.empty() ? std::to_string(i) : prefix + "." + std::to_string(i), out);
            }
            return;
        case YAML::NodeType::Scalar:
            out.emplace_back(prefix, node.Scalar());
            return;
        case YAML::NodeType::Null:
            out.emplace_back(prefix, "");
            return;
        case YAML::NodeType::Undefined:
            return;
    }
}

}  // namespace

flat_params flat_params::from_yaml(const YAML::Node& params) {
    flat_params p;
    if (!params.IsDefined() || params.IsNull()) {
        p.yaml_ = "{}";
        return p;
    }
    flatten(params, "", p.items_);
    YAML::Emitter emitter;
    emitter << params;
    p.yaml_ = emitter.c_str();
    return p;
}

troupe_plugin_params flat_params::view(int32_t backend, const troupe_model_services* model) const {
    c_items_.clear();
    for (const auto& [key, value] : items_) c_items_.push_back(troupe_param{key.c_str(), value.c_str()});
    troupe_plugin_params v{};
    v.struct_size = sizeof(troupe_plugin_params);
    v.version = TROUPE_PLUGIN_PARAMS_VERSION;
    v.items = c_items_.data();
    v.n_items = c_items_.size();
    v.yaml = yaml_.c_str();
    v.backend = backend;
    v.model = model;
    return v;
}

}  // namespace troupe
