// bpe_encoder: byte-level BPE over one pre-tokenized word, as llama.cpp runs it.
//
// The word is spelled in the byte-level alphabet (byte_level.h) and starts as one symbol per codepoint. A
// min-heap holds adjacent pairs that tokenizer.ggml.merges lists, by merge rank (ties: the leftmost pair);
// merging works as in spm_encoder.h. Each final symbol is its token, or else the tokens of its single
// characters (every byte has one in a byte-level vocabulary). With ignore_merges a word that is itself a
// token is emitted whole.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/tokenizer/vocab.h"

namespace troupe::tok {

void bpe_encode_word(const vocab& v, std::string_view byte_encoded_word, std::vector<int32_t>& out);

}  // namespace troupe::tok
