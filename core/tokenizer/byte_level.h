// byte_level: GPT-2's reversible map between bytes and printable codepoints, in which byte-level BPE
// vocabularies spell their tokens.
//
// Bytes that are printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68 map, in
// byte order, to U+0100, U+0101, ... (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::tok {

// The codepoint that stands for a byte.
uint32_t byte_to_codepoint(uint8_t byte);
// The byte a codepoint stands for, or -1 if it stands for none.
int codepoint_to_byte(uint32_t cpt);

// Spells raw bytes in the byte-level alphabet (UTF-8 of the mapped codepoints).
void append_byte_encoded(std::string& out, std::string_view bytes);
// The raw bytes a byte-level token stands for; a codepoint outside the alphabet is kept as its UTF-8.
std::string byte_decode(std::string_view token_text);

}  // namespace troupe::tok
