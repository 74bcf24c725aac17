// split_rules: the matchers the pre-tokenizers are built from (see pre_tokenizer.h).
//
// Every rule takes the text as codepoints and the current pieces as lengths (in codepoints, summing to
// cpts.size()), and returns the refined pieces: inside each piece it finds matches left to right, like a
// regex search, and emits the text before a match, the match, and the text after the last match as
// pieces (empty ones are dropped). A rule never sees past the end of its piece: a lookahead at the end
// of a piece sees "no character".
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace troupe::tok {

using piece_lengths = std::vector<size_t>;

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
piece_lengths split_gpt2(const std::vector<uint32_t>& cpts, const piece_lengths& pieces);

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+      (max_digits 3: llama3; 1: qwen2)
piece_lengths split_llama3(const std::vector<uint32_t>& cpts, const piece_lengths& pieces, size_t max_digits);

// A character-class rule:  prefix? body{min_run,max_run}   (max_run 0: unbounded), or with at_end the
// run must reach the end of the piece (\s+$). The prefix is optional and tried first, as a greedy `?` is.
struct class_rule {
    bool (*prefix)(uint32_t cpt) = nullptr;
    bool (*body)(uint32_t cpt) = nullptr;
    size_t min_run = 1;
    size_t max_run = 0;
    bool at_end = false;
};
piece_lengths split_class(const std::vector<uint32_t>& cpts, const piece_lengths& pieces, const class_rule& rule);

}  // namespace troupe::tok
