// special_tokens: cuts the input text at special tokens before the model tokenizer sees it.
//
// llama.cpp's order, so ids match: special tokens are taken longest text first, and each one splits every
// remaining raw-text fragment at all of its occurrences (left to right); later, shorter tokens only see
// what is left. User-defined tokens are always matched; control and unknown tokens (<s>, <|eot_id|>,
// <unk>) only when parse_special is true, so that user text cannot forge them by default.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/tokenizer/vocab.h"

namespace troupe::tok {

struct fragment {
    int32_t token_id;       // -1: raw text
    std::string_view text;  // the raw text (a view into the input), or the token's text
};

std::vector<fragment> split_special(const vocab& v, std::string_view text, bool parse_special);

}  // namespace troupe::tok
