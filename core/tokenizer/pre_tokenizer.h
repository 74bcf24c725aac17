// pre_tokenizer: splits text into words before byte-level BPE, as the regexes named by tokenizer.ggml.pre.
//
// Each pre-tokenizer is a list of rules applied in turn, llama.cpp's way: a rule runs inside each piece the
// previous rules produced, and both its matches and the text between them become pieces, so no rule can
// look across an earlier split. The rules are hand-written matchers, not std::regex (too slow, and no
// Unicode classes). Text is read as codepoints; ill-formed UTF-8 reads as U+FFFD (llama.cpp does the same).
//
//   name(s) in GGUF                         rules
//   default                                 [\p{P}$+<=>^~|]+ ; gpt2 ; \p{N}+ ; [0-9]{3}
//   gpt-2 (gpt2), mpt, phi-2, olmo          gpt2 = 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
//   ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ llama3 (llama-v3, llama-bpe, dbrx,
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//     smaug-bpe, falcon3)                     ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2 (stablelm2, deepseek-r1-qwen)     the llama3 rule with \p{N} instead of \p{N}{1,3}
//   deepseek-llm                            [\r\n] ; \s?[cased letters]+ ; \s?[!-/:-~！-／：-～‘-‟　-。]+ ; \s+$ ;
//                                           [CJK]+ ; \p{N}+
//   deepseek-coder                          [\r\n] ; \s?\p{L}+ ; \s?\p{P}+ ; [CJK]+ ; \p{N}
//   falcon                                  [\p{P}$+<=>^~|`]+ ; gpt2 ; [0-9]{3}
//   starcoder, refact (command-r)           \p{N} ; gpt2
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace troupe::tok {

enum class pre_type { default_bpe, gpt2, llama3, qwen2, deepseek_llm, deepseek_coder, falcon, starcoder };

// The pre-tokenizer a tokenizer.ggml.pre name selects; an unknown name is an error listing the known ones.
result<pre_type> parse_pre_type(std::string_view name);
// The names parse_pre_type accepts, comma-separated.
std::string supported_pre_names();
// Whether the original tokenizer ignores merges for words that are whole tokens (llama3 does).
bool pre_ignores_merges(pre_type type);
// Whether the original tokenizer adds BOS when the metadata does not say (llama3 does).
bool pre_adds_bos_by_default(pre_type type);

// The words of text, each as UTF-8 (re-encoded from the codepoints read).
std::vector<std::string> pre_tokenize(pre_type type, std::string_view text);

// The same as codepoints and word lengths (in codepoints, summing to cpts.size()).
std::vector<size_t> pre_tokenize_lengths(pre_type type, const std::vector<uint32_t>& cpts);

}  // namespace troupe::tok
