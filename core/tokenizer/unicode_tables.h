// unicode_tables: the generated codepoint tables behind unicode.h (see gen_unicode_tables.py).
//
// k_codepoint_ranges covers every codepoint 0..0x10FFFF as runs with equal flags: run i spans
// [first_i, first_{i+1}) and the last run ends at 0x10FFFF; `first` is strictly increasing, run 0 starts at 0.
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe::tok {

struct codepoint_range {
    uint32_t first;
    uint16_t flags;  // codepoint_flags bits
};

struct codepoint_span {
    uint32_t first;
    uint32_t last;  // inclusive
};

extern const codepoint_range k_codepoint_ranges[];
extern const size_t k_n_codepoint_ranges;
extern const codepoint_span k_deepseek_letters[];
extern const size_t k_n_deepseek_letters;

}  // namespace troupe::tok
