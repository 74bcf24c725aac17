#include "actors/tokenizer/tokenizer_core.h"

#include "core/result.h"

namespace troupe {

tokenizer_core::tokenizer_core(std::shared_ptr<const text_codec> codec) : codec_(std::move(codec)) {
    TROUPE_ASSERT(codec_ != nullptr, "tokenizer actor needs a codec");
}

result<std::vector<int32_t>> tokenizer_core::prepare(const submit_request& r) const {
    std::vector<int32_t> ids = r.prompt_ids ? *r.prompt_ids : codec_->encode(r.prompt);
    if (ids.empty()) return make_error("the prompt is empty");
    const int32_t n_vocab = codec_->n_vocab();
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
            return make_error("prompt_ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                              " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
        }
    }
    return ids;
}

}  // namespace troupe
