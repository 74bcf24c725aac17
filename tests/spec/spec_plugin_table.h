// spec_plugin_table: the spec plugins the exactness harness checks, one row each. A row names the plugin and gives
// its params for a target model (or says why it does not apply: a drafter, a heads file that is not there). A new
// plugin plugs in with a row in spec_plugin_table.cpp; its library missing from the build skips its tests with a
// message, as does a file it needs.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace troupe::testing {

struct spec_params {
    bool applies = true;
    std::string yaml;     // the plugin's params, "{}" for its defaults
    std::string why_not;  // when it does not apply: what is missing and how to make it
};

struct spec_plugin_row {
    std::string label;   // test name part: "lookahead_small"
    std::string plugin;  // spec/<plugin>
    // The params for a target: `model_path` is the target's file under ../shared/models.
    std::function<spec_params(const std::string& model_path)> params;
    bool sampling = true;  // also in the sampling test (rows with big trees are left to the greedy one, for time)
    int32_t sampling_max_draft = 0;  // > 0: draft nodes per step in the sampling test (0: the plugin's max_nodes)
};

const std::vector<spec_plugin_row>& spec_plugin_rows();

// The library of spec/<name> in the build's plugin folder, if it was built.
bool spec_plugin_built(const std::string& name, std::string& path);

}  // namespace troupe::testing
