// engine_params_from: the engine's settings from the YAML config (scheduler.*, kv.prefix_caching), the
// one place `troupe run`, `troupe serve` and the benchmarks turn an engine_config into engine_params.
#pragma once

#include "actors/engine/engine.h"
#include "core/config/engine_config.h"

namespace troupe {

engine_params engine_params_from(const engine_config& config);

}  // namespace troupe
