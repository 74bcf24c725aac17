#include "actors/engine/engine_from_model.h"

#include "actors/tokenizer/tokenizer_codec.h"

namespace troupe {

engine_parts engine_parts_from(loaded_model& model, engine_params& params) {
    engine_parts parts{std::shared_ptr<model_runner>(std::move(model.runner)), make_tokenizer_codec(model.tok), {}};
    if (model.spec) {
        parts.spec = model.spec;
        params.max_draft = model.spec->max_nodes();
    }
    return parts;
}

}  // namespace troupe
