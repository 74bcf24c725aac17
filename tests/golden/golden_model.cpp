#include "tests/golden/golden_model.h"

#include "core/loader/model_loader.h"

namespace troupe::testing {

engine_config golden_config(const std::string& path) {
    engine_config config;
    config.model = path;
    config.plugins.attention = plugin_config("gqa");
    config.plugins.quant = plugin_config("q8");
    config.scheduler.max_running_seqs = 4;
    return config;
}

result<golden_model> load_golden_model(const std::string& path) {
    auto m = load_model(golden_config(path));
    if (!m.ok()) return m.err();
    golden_model g;
    g.tok = m->tok;
    g.runner = std::move(m->runner);
    return g;
}

}  // namespace troupe::testing
