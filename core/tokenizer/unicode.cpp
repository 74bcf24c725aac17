// Lookups in the generated tables: Latin-1 from a small table built once, the rest by binary search.
#include "core/tokenizer/unicode.h"

#include <algorithm>
#include <array>

#include "core/tokenizer/unicode_tables.h"

namespace troupe::tok {
namespace {

uint16_t search_flags(uint32_t cpt) {
    const codepoint_range* begin = k_codepoint_ranges;
    const codepoint_range* end = k_codepoint_ranges + k_n_codepoint_ranges;
    // The last run whose first codepoint is <= cpt.
    const codepoint_range* it =
        std::upper_bound(begin, end, cpt, [](uint32_t c, const codepoint_range& r) { return c < r.first; });
    return (it - 1)->flags;
}

const std::array<uint16_t, 256> k_latin1 = [] {
    std::array<uint16_t, 256> table{};
    for (uint32_t c = 0; c < 256; ++c) table[c] = search_flags(c);
    return table;
}();

}  // namespace

codepoint_flags flags_of(uint32_t cpt) {
    if (cpt < 256) return codepoint_flags{k_latin1[cpt]};
    if (cpt > 0x10FFFF) return codepoint_flags{};
    return codepoint_flags{search_flags(cpt)};
}

bool is_deepseek_letter(uint32_t cpt) {
    const codepoint_span* begin = k_deepseek_letters;
    const codepoint_span* end = k_deepseek_letters + k_n_deepseek_letters;
    const codepoint_span* it =
        std::upper_bound(begin, end, cpt, [](uint32_t c, const codepoint_span& s) { return c < s.first; });
    return it != begin && cpt <= (it - 1)->last;
}

}  // namespace troupe::tok
