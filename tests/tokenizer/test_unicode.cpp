// The generated codepoint tables and the two UTF-8 readers.
#include <gtest/gtest.h>

#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/unicode.h"
#include "core/tokenizer/utf8.h"

namespace troupe::tok {
namespace {

TEST(unicode, codepoints_fall_into_their_general_category_groups) {
    EXPECT_TRUE(flags_of('a').is_letter());
    EXPECT_TRUE(flags_of(0x4E16).is_letter());  // 世
    EXPECT_TRUE(flags_of(0xD55C).is_letter());  // 한
    EXPECT_TRUE(flags_of('7').is_number());
    EXPECT_TRUE(flags_of(0x0663).is_number());  // Arabic-Indic three
    EXPECT_TRUE(flags_of(0x216B).is_number());  // Roman numeral twelve (Nl)
    EXPECT_TRUE(flags_of(0x00BD).is_number());  // ½ (No)
    EXPECT_TRUE(flags_of(',').is_punctuation());
    EXPECT_TRUE(flags_of(0x3001).is_punctuation());  // 、
    EXPECT_TRUE(flags_of('$').is_symbol());
    EXPECT_TRUE(flags_of(0x1F600).is_symbol());  // 😀
    EXPECT_TRUE(flags_of(0x0301).is_mark());     // combining acute
    EXPECT_FALSE(flags_of('$').is_punctuation());
    EXPECT_FALSE(flags_of(0x10FFFF + 1).is_codepoint());
    EXPECT_TRUE(flags_of(0x0378).is_codepoint());  // unassigned, but a codepoint
}

TEST(unicode, whitespace_is_the_white_space_property) {
    for (uint32_t c : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2003u, 0x2028u, 0x3000u}) {
        EXPECT_TRUE(flags_of(c).is_whitespace()) << std::hex << c;
    }
    for (uint32_t c : {0x1Cu, 0x1Fu, 0x200Bu, 0x61u, 0u}) {
        EXPECT_FALSE(flags_of(c).is_whitespace()) << std::hex << c;
    }
}

TEST(unicode, deepseek_classes_hold_their_ranges) {
    EXPECT_TRUE(is_deepseek_letter('Q'));
    EXPECT_TRUE(is_deepseek_letter(0x212A));  // Kelvin sign
    EXPECT_TRUE(is_deepseek_letter(0x1F7D));
    EXPECT_FALSE(is_deepseek_letter(0x4E16));
    EXPECT_FALSE(is_deepseek_letter('1'));
    EXPECT_TRUE(is_deepseek_cjk(0x4E16));
    EXPECT_TRUE(is_deepseek_cjk(0xD55C));
    EXPECT_FALSE(is_deepseek_cjk('a'));
}

TEST(utf8, lenient_reading_replaces_each_ill_formed_byte) {
    EXPECT_EQ(decode_utf8_lenient("a\xc3\xa9\xf0\x9f\x98\x80"), (std::vector<uint32_t>{'a', 0xE9, 0x1F600}));
    EXPECT_EQ(decode_utf8_lenient("\x80z"), (std::vector<uint32_t>{0xFFFD, 'z'}));
    EXPECT_EQ(decode_utf8_lenient("\xe4\xb8"), (std::vector<uint32_t>{0xFFFD, 0xFFFD}));
}

struct sanitize_case {
    std::string in;
    bool final;
    std::string out;
    size_t consumed;
};

TEST(utf8, sanitize_keeps_incomplete_tails_and_replaces_maximal_ill_formed_parts) {
    const std::string rep = "\xef\xbf\xbd";
    const sanitize_case cases[] = {
        {"abc", false, "abc", 3},
        {"a\xf0\x9f\x98", false, "a", 1},       // incomplete emoji held back
        {"a\xf0\x9f\x98", true, "a" + rep, 4},  // ... or replaced at the end
        {"\xf0\x9f\x98\x80", false, "\xf0\x9f\x98\x80", 4},
        {"\xff"
         "a",
         false, rep + "a", 2},  // never a lead byte
        {"\xe4\xb8"
         "a",
         false, rep + "a", 3},                        // a broken sequence is one replacement
        {"\xed\xa0\x80", false, rep + rep + rep, 3},  // a surrogate is not well-formed
        {"\xc0\xaf", false, rep + rep, 2},            // overlong
    };
    for (const sanitize_case& c : cases) {
        std::string out;
        EXPECT_EQ(sanitize_utf8(c.in, out, c.final), c.consumed) << c.in;
        EXPECT_EQ(out, c.out) << c.in;
    }
}

TEST(byte_level, every_byte_maps_to_a_codepoint_and_back) {
    EXPECT_EQ(byte_to_codepoint(' '), 0x120u);
    EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);
    EXPECT_EQ(byte_to_codepoint('A'), static_cast<uint32_t>('A'));
    for (int b = 0; b < 256; ++b) EXPECT_EQ(codepoint_to_byte(byte_to_codepoint(static_cast<uint8_t>(b))), b);
    EXPECT_EQ(codepoint_to_byte(0x4E16), -1);
    std::string all;
    for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
    std::string encoded;
    append_byte_encoded(encoded, all);
    EXPECT_EQ(byte_decode(encoded), all);
}

}  // namespace
}  // namespace troupe::tok
