// unicode: codepoint classes for the pre-tokenizers (regex \p{L}, \p{N}, \p{P}, \s, ...).
//
// Flags come from generated range tables (gen_unicode_tables.py, Python's unicodedata): the general
// category group of each codepoint plus the White_Space property, which regex engines use for \s and which
// cuts across groups (U+0009 is a control, U+0020 a separator). A codepoint outside the text (the
// pre-tokenizers' "no character here") has no flags at all: codepoint_flags{}.
#pragma once

#include <cstdint>

namespace troupe::tok {

struct codepoint_flags {
    static constexpr uint16_t letter = 1 << 0;       // \p{L}
    static constexpr uint16_t number = 1 << 1;       // \p{N}
    static constexpr uint16_t punctuation = 1 << 2;  // \p{P}
    static constexpr uint16_t symbol = 1 << 3;       // \p{S}
    static constexpr uint16_t mark = 1 << 4;         // \p{M}
    static constexpr uint16_t separator = 1 << 5;    // \p{Z}
    static constexpr uint16_t control = 1 << 6;      // \p{C} except unassigned
    static constexpr uint16_t whitespace = 1 << 7;   // \s (White_Space)
    static constexpr uint16_t unassigned = 1 << 8;   // Cn

    uint16_t bits = 0;  // 0: not a codepoint (outside the text)

    bool is_letter() const { return bits & letter; }
    bool is_number() const { return bits & number; }
    bool is_punctuation() const { return bits & punctuation; }
    bool is_symbol() const { return bits & symbol; }
    bool is_mark() const { return bits & mark; }
    bool is_whitespace() const { return bits & whitespace; }
    bool is_codepoint() const { return bits != 0; }
};

// Flags of a codepoint; codepoints above 0x10FFFF have none.
codepoint_flags flags_of(uint32_t cpt);

// DeepSeek LLM's pre-tokenizer letter class (the cased letters: Lu, Ll, Lt of its Unicode version).
bool is_deepseek_letter(uint32_t cpt);

// The CJK class of the DeepSeek pre-tokenizers: [一-龥ࠀ-一가-퟿] = U+0800..U+9FA5, U+AC00..U+D7FF.
inline bool is_deepseek_cjk(uint32_t cpt) {
    return (cpt >= 0x0800 && cpt <= 0x9FA5) || (cpt >= 0xAC00 && cpt <= 0xD7FF);
}

}  // namespace troupe::tok
