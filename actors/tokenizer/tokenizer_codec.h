// tokenizer_codec: the text_codec of a real tokenizer (core/tokenizer). Prompts are encoded with BOS
// and with control tokens written in the text matched; generated tokens are decoded as a
// continuation of the prompt (leading spaces kept), with incomplete UTF-8 held back.
#pragma once

#include <memory>

#include "actors/tokenizer/text_codec.h"

namespace troupe {

class tokenizer;

std::shared_ptr<const text_codec> make_tokenizer_codec(std::shared_ptr<const tokenizer> tok);

}  // namespace troupe
