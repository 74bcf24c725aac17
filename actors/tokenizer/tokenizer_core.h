// tokenizer_core: turns a submission into prompt ids (the tokenizer actor's pure core). Prompt ids
// given by the client are used as they are, after a range check; otherwise the text is encoded.
#pragma once

#include <memory>
#include <vector>

#include "actors/tokenizer/text_codec.h"
#include "actors/tokenizer/tokenizer_msgs.h"
#include "core/result.h"

namespace troupe {

class tokenizer_core {
public:
    explicit tokenizer_core(std::shared_ptr<const text_codec> codec);

    result<std::vector<int32_t>> prepare(const submit_request& r) const;
    const text_codec& codec() const { return *codec_; }

private:
    std::shared_ptr<const text_codec> codec_;
};

}  // namespace troupe
