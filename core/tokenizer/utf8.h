// utf8: the two UTF-8 readers the tokenizers need and the writer.
//
// - Lenient (llama.cpp's reading, used to tokenize): a lead byte says the length, continuation bytes are
//   checked, overlongs and surrogates pass; an ill-formed byte becomes U+FFFD and reading resumes at the
//   next byte. The SentencePiece symbol split is even more lenient (utf8_sequence_length).
// - Strict (Unicode Table 3-7, used for text that leaves the engine): sanitize_utf8 copies well-formed
//   sequences, replaces each maximal ill-formed subpart by U+FFFD, and can hold back an incomplete tail
//   that later bytes may complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::tok {

inline constexpr uint32_t k_replacement_char = 0xFFFD;

// Length of the sequence a byte starts, from its top four bits (1 for ASCII and continuation bytes).
inline size_t utf8_sequence_length(uint8_t first_byte) {
    static constexpr uint8_t k_lengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return k_lengths[first_byte >> 4];
}

// Codepoints of text, read leniently (see above).
std::vector<uint32_t> decode_utf8_lenient(std::string_view text);

// Appends the UTF-8 encoding of cpt (cpt <= 0x10FFFF).
void append_utf8(std::string& out, uint32_t cpt);

// Appends the strictly well-formed rendering of `in` to `out` and returns how many bytes of `in` it consumed.
// With final == false an incomplete but so far well-formed sequence at the end is not consumed (the caller
// keeps it for later); with final == true it becomes U+FFFD.
size_t sanitize_utf8(std::string_view in, std::string& out, bool final);

}  // namespace troupe::tok
