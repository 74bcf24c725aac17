// engine_parts_from: the one place where a loaded model (core/loader) becomes the engine's parts: the
// runner, the tokenizer's codec and, where a spec plugin is loaded, its draft proposer with the number
// of drafts to ask for. `troupe run`, `troupe serve` and the pipeline tests build their engines here.
#pragma once

#include "actors/engine/engine.h"
#include "core/loader/model_loader.h"

namespace troupe {

// Moves the runner out of `model`; sets params.max_draft when a proposer is there.
engine_parts engine_parts_from(loaded_model& model, engine_params& params);

}  // namespace troupe
