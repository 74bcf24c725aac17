// The pre-tokenizer table: names to types, and each type's list of rules (see pre_tokenizer.h).
#include "core/tokenizer/pre_tokenizer.h"

#include <array>
#include <utility>

#include "core/tokenizer/split_rules.h"
#include "core/tokenizer/unicode.h"
#include "core/tokenizer/utf8.h"

namespace troupe::tok {
namespace {

constexpr std::array<std::pair<std::string_view, pre_type>, 23> k_names = {{
    {"default", pre_type::default_bpe},
    {"gpt-2", pre_type::gpt2},
    {"gpt2", pre_type::gpt2},
    {"mpt", pre_type::gpt2},
    {"phi-2", pre_type::gpt2},
    {"olmo", pre_type::gpt2},
    {"llama3", pre_type::llama3},
    {"llama-v3", pre_type::llama3},
    {"llama-bpe", pre_type::llama3},
    {"dbrx", pre_type::llama3},
    {"smaug-bpe", pre_type::llama3},
    {"falcon3", pre_type::llama3},
    {"qwen2", pre_type::qwen2},
    {"stablelm2", pre_type::qwen2},
    {"deepseek-r1-qwen", pre_type::qwen2},
    {"deepseek-llm", pre_type::deepseek_llm},
    {"deepseek-coder", pre_type::deepseek_coder},
    {"falcon", pre_type::falcon},
    {"starcoder", pre_type::starcoder},
    {"refact", pre_type::starcoder},
    {"command-r", pre_type::starcoder},
    {"smollm", pre_type::starcoder},
    {"codeshell", pre_type::starcoder},
}};

bool is_whitespace(uint32_t c) {
    return flags_of(c).is_whitespace();
}
bool is_letter(uint32_t c) {
    return flags_of(c).is_letter();
}
bool is_number(uint32_t c) {
    return flags_of(c).is_number();
}
bool is_punctuation(uint32_t c) {
    return flags_of(c).is_punctuation();
}
bool is_ascii_digit(uint32_t c) {
    return c >= '0' && c <= '9';
}
bool is_cr_or_lf(uint32_t c) {
    return c == '\r' || c == '\n';
}
// [\p{P}\$\+<=>\^~\|]
bool is_default_punct(uint32_t c) {
    return is_punctuation(c) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' ||
           c == '|';
}
// [\p{P}\$\+<=>\^~\|`]
bool is_falcon_punct(uint32_t c) {
    return is_default_punct(c) || c == '`';
}
// DeepSeek's literal classes are matched as their regexes define them. (llama.cpp replaces non-ASCII
// whitespace by U+000B before running std::wregex, so there U+3000 and U+2003 fall out of [ࠀ-一] and
// [　-。]; the tokenizer.json regexes, which the models were trained with, keep them.)
// [!-/:-~！-／：-～‘-‟　-。]
bool is_deepseek_punct(uint32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) || (c >= 0xFF01 && c <= 0xFF0F) ||
           (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002);
}

piece_lengths apply(const std::vector<uint32_t>& cpts, const piece_lengths& pieces, const class_rule& rule) {
    return split_class(cpts, pieces, rule);
}

}  // namespace

result<pre_type> parse_pre_type(std::string_view name) {
    for (const auto& [n, type] : k_names) {
        if (n == name) return type;
    }
    return make_error("unknown pre-tokenizer '" + std::string(name) + "' (supported: " + supported_pre_names() + ")");
}

std::string supported_pre_names() {
    std::string names;
    for (const auto& [n, type] : k_names) {
        if (!names.empty()) names += ", ";
        names += n;
    }
    return names;
}

bool pre_ignores_merges(pre_type type) {
    return type == pre_type::llama3;
}
bool pre_adds_bos_by_default(pre_type type) {
    return type == pre_type::llama3;
}

std::vector<size_t> pre_tokenize_lengths(pre_type type, const std::vector<uint32_t>& cpts) {
    piece_lengths p;
    if (cpts.empty()) return p;
    p.push_back(cpts.size());
    switch (type) {
        case pre_type::default_bpe:
            p = apply(cpts, p, {.body = is_default_punct});
            p = split_gpt2(cpts, p);
            p = apply(cpts, p, {.body = is_number});
            p = apply(cpts, p, {.body = is_ascii_digit, .min_run = 3, .max_run = 3});
            return p;
        case pre_type::gpt2:
            return split_gpt2(cpts, p);
        case pre_type::llama3:
            return split_llama3(cpts, p, 3);
        case pre_type::qwen2:
            return split_llama3(cpts, p, 1);
        case pre_type::deepseek_llm:
            p = apply(cpts, p, {.body = is_cr_or_lf, .max_run = 1});
            p = apply(cpts, p, {.prefix = is_whitespace, .body = is_deepseek_letter});
            p = apply(cpts, p, {.prefix = is_whitespace, .body = is_deepseek_punct});
            p = apply(cpts, p, {.body = is_whitespace, .at_end = true});
            p = apply(cpts, p, {.body = is_deepseek_cjk});
            p = apply(cpts, p, {.body = is_number});
            return p;
        case pre_type::deepseek_coder:
            p = apply(cpts, p, {.body = is_cr_or_lf, .max_run = 1});
            p = apply(cpts, p, {.prefix = is_whitespace, .body = is_letter});
            p = apply(cpts, p, {.prefix = is_whitespace, .body = is_punctuation});
            p = apply(cpts, p, {.body = is_deepseek_cjk});
            p = apply(cpts, p, {.body = is_number, .max_run = 1});
            return p;
        case pre_type::falcon:
            p = apply(cpts, p, {.body = is_falcon_punct});
            p = split_gpt2(cpts, p);
            p = apply(cpts, p, {.body = is_ascii_digit, .min_run = 3, .max_run = 3});
            return p;
        case pre_type::starcoder:
            p = apply(cpts, p, {.body = is_number, .max_run = 1});
            return split_gpt2(cpts, p);
    }
    TROUPE_ASSERT(false, "unhandled pre_type");
    return p;
}

std::vector<std::string> pre_tokenize(pre_type type, std::string_view text) {
    const std::vector<uint32_t> cpts = decode_utf8_lenient(text);
    const std::vector<size_t> lengths = pre_tokenize_lengths(type, cpts);
    std::vector<std::string> words;
    words.reserve(lengths.size());
    size_t pos = 0;
    for (size_t n : lengths) {
        std::string& w = words.emplace_back();
        for (size_t i = 0; i < n; ++i) append_utf8(w, cpts[pos + i]);
        pos += n;
    }
    return words;
}

}  // namespace troupe::tok
