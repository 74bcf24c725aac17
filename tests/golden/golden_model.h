// Loads a shared model the way `troupe run` does with the default config (attention/gqa and quant/q8
// plugins), for the golden tests.
#pragma once

#include <memory>
#include <string>

#include "core/config/engine_config.h"
#include "core/model/model_runner.h"
#include "core/tokenizer/tokenizer.h"

namespace troupe::testing {

struct golden_model {
    std::shared_ptr<const tokenizer> tok;
    std::unique_ptr<model_runner> runner;
};

// The default config with the model at `path`, attention/gqa and quant/q8 (which runs the Q8_0 tensors).
engine_config golden_config(const std::string& path);

result<golden_model> load_golden_model(const std::string& path);

}  // namespace troupe::testing
