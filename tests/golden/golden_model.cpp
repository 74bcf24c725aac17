#include "tests/golden/golden_model.h"

#include <yaml-cpp/yaml.h>

#include "core/loader/model_loader.h"

namespace troupe::testing {

const char* setup_name(golden_setup s) {
    switch (s) {
        case golden_setup::default_config:
            return "default_config";
        case golden_setup::builtin_quantized:
            return "builtin_quantized";
        case golden_setup::builtin_float:
            return "builtin_float";
        case golden_setup::float_recipe:
            return "float_recipe";
        case golden_setup::int8_recipe:
            return "int8_recipe";
    }
    return "?";
}

engine_config golden_config(const std::string& path, golden_setup setup) {
    engine_config config;
    config.model = path;
    config.plugins.attention = plugin_config("gqa");
    config.scheduler.max_running_seqs = 4;
    switch (setup) {
        case golden_setup::default_config:
            break;
        case golden_setup::builtin_quantized:
            config.plugins.quant = plugin_config("none");
            config.kernels.activations = kernel_activations::quantized;
            config.plugins.attention.params = YAML::Load("{numerics: ggml}");
            break;
        case golden_setup::builtin_float:
            config.plugins.quant = plugin_config("none");
            config.kernels.activations = kernel_activations::float32;
            break;
        case golden_setup::float_recipe:
            config.plugins.quant = plugin_config("q8");
            config.plugins.quant.params = YAML::Load("{activations: float}");
            config.kernels.activations = kernel_activations::float32;
            break;
        case golden_setup::int8_recipe:
            config.plugins.quant = plugin_config("q8");
            config.plugins.quant.params = YAML::Load("{activations: int8}");
            config.kernels.activations = kernel_activations::quantized;
            config.plugins.attention.params = YAML::Load("{numerics: ggml}");
            break;
    }
    return config;
}

result<golden_model> load_golden_model(const std::string& path, golden_setup setup) {
    auto m = load_model(golden_config(path, setup));
    if (!m.ok()) return m.err();
    golden_model g;
    g.tok = m->tok;
    g.runner = std::move(m->runner);
    return g;
}

}  // namespace troupe::testing
