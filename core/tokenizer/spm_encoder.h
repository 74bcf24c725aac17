// spm_encoder: SentencePiece BPE as llama.cpp runs it, for the text between special tokens.
//
// The text (spaces already escaped to U+2581) starts as one symbol per UTF-8 character. A max-heap holds
// every adjacent pair whose concatenation is a token, by that token's score (ties: the leftmost pair).
// Popping a pair merges it unless one side has changed since it was pushed; the new symbol's pairs with its
// neighbours are pushed. At the end each symbol is its token, or, if it is not one (a character outside the
// vocabulary), its bytes as byte-fallback tokens <0xXX>, or UNK where even those are missing. (llama.cpp's
// re-segmentation of a symbol that is not a token through the pairs that formed it never applies: only
// pairs that are tokens are merged, so a symbol that is not a token is a single character.)
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/tokenizer/vocab.h"

namespace troupe::tok {

void spm_encode(const vocab& v, std::string_view escaped_text, std::vector<int32_t>& out);

}  // namespace troupe::tok
