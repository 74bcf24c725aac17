// Each pre-tokenizer on hand-made strings. The expected splits were checked against the original regexes
// run by a regex engine with Unicode classes (applied one after another, llama.cpp's way).
#include <gtest/gtest.h>

#include "core/tokenizer/pre_tokenizer.h"

namespace troupe::tok {
namespace {

struct split_case {
    const char* pre;
    const char* text;
    std::vector<std::string> words;
};

const split_case k_cases[] = {
    // gpt2: contractions (lower case only), optional space before letters / digits / other, whitespace runs
    // give their last space to the next word.
    {"gpt-2", "I've been 'told he's there", {"I", "'ve", " been", " '", "told", " he", "'s", " there"}},
    {"gpt-2", "'RE 'Ve", {"'", "RE", " '", "Ve"}},
    {"gpt-2", "Hello  world", {"Hello", " ", " world"}},
    {"gpt-2", "a  \n\n b", {"a", "  \n\n", " b"}},
    {"gpt-2", "12345 67", {"12345", " 67"}},
    {"gpt-2", "!!!?? ok", {"!!!??", " ok"}},
    {"gpt-2", "x\t\ty ", {"x", "\t", "\t", "y", " "}},
    {"gpt-2", "na\xc3\xafve caf\xc3\xa9", {"na\xc3\xafve", " caf\xc3\xa9"}},
    {"mpt", "Hello  world", {"Hello", " ", " world"}},
    // default: punctuation runs first, then gpt2, then digit runs cut into threes.
    {"default", "1234567", {"123", "456", "7"}},
    {"default", "a+b=c", {"a", "+", "b", "=", "c"}},
    {"default", "hello, world!!", {"hello", ",", " world", "!!"}},
    {"default", "x 12345", {"x", " ", "123", "45"}},
    // llama3: case-insensitive contractions, a non-letter may lead a word, digits in groups of up to three,
    // newlines stick to punctuation and to preceding whitespace.
    {"llama3", "I'VE 'Ll We'Re", {"I", "'VE", " '", "Ll", " We", "'Re"}},
    {"llama3", "1234567 89", {"123", "456", "7", " ", "89"}},
    {"llama3", "a\n\n\nb", {"a", "\n\n\n", "b"}},
    {"llama3", "foo!!\n\nbar", {"foo", "!!\n\n", "bar"}},
    {"llama3", "  hi  ", {" ", " hi", "  "}},
    {"llama3", " ?x", {" ?", "x"}},
    {"llama3", "\xc2\xbfQu\xc3\xa9?", {"\xc2\xbfQu\xc3\xa9", "?"}},
    {"llama3", "ab12cd", {"ab", "12", "cd"}},
    {"llama3", "x \n y", {"x", " \n", " y"}},
    {"llama-bpe", "1234567 89", {"123", "456", "7", " ", "89"}},
    // qwen2: llama3 with single digits.
    {"qwen2", "12345", {"1", "2", "3", "4", "5"}},
    {"qwen2", "DON'T stop", {"DON", "'T", " stop"}},
    {"qwen2", "a,b", {"a", ",b"}},
    // deepseek-llm: newlines alone, cased letters, ASCII/fullwidth punctuation, trailing spaces, CJK, numbers.
    {"deepseek-llm",
     "Hello, \xe4\xb8\x96\xe7\x95\x8c! 123",
     {"Hello", ",", " ", "\xe4\xb8\x96\xe7\x95\x8c", "!", " ", "123"}},
    {"deepseek-llm",
     "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 text\n",
     {"\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4", " text", "\n"}},
    {"deepseek-llm", "end  ", {"end", "  "}},
    {"deepseek-llm", "x\xef\xbc\x91\xef\xbc\x92\xef\xbc\x93y", {"x", "\xef\xbc\x91\xef\xbc\x92\xef\xbc\x93", "y"}},
    // deepseek-coder: letters, punctuation, CJK, single digits.
    {"deepseek-coder", "def f(x):\n  return 42", {"def", " f", "(", "x", "):", "\n", " ", " return", " ", "4", "2"}},
    {"deepseek-coder",
     "\xe4\xb8\xad\xe6\x96\x87"
     "abc 12",
     {"\xe4\xb8\xad\xe6\x96\x87", "abc", " ", "1", "2"}},
    {"deepseek-coder", "a.b", {"a", ".", "b"}},
    // falcon: punctuation and symbol runs, gpt2, ASCII digits in threes.
    {"falcon", "1234567 x", {"123", "456", "7", " x"}},
    {"falcon", "a==b`c", {"a", "==", "b", "`", "c"}},
    {"falcon", "cost $12345", {"cost", " ", "$", "123", "45"}},
    // starcoder / refact: every digit alone, then gpt2.
    {"starcoder", "x = 123;", {"x", " =", " ", "1", "2", "3", ";"}},
    {"refact", "v2.10", {"v", "2", ".", "1", "0"}},
};

TEST(pre_tokenizer, every_pre_tokenizer_splits_hand_made_strings_as_its_regexes) {
    for (const split_case& c : k_cases) {
        auto type = parse_pre_type(c.pre);
        ASSERT_TRUE(type.ok()) << c.pre;
        EXPECT_EQ(pre_tokenize(*type, c.text), c.words) << c.pre << ": '" << c.text << "'";
    }
}

TEST(pre_tokenizer, words_always_concatenate_back_to_the_text) {
    const std::string text =
        "  Hello,\tw\xc3\xb6rld!! 1234567 \xe4\xb8\x96\xe7\x95\x8c\r\n\n 'S it's  \xf0\x9f\x98\x80 end  ";
    for (const char* name : {"default", "gpt-2", "llama3", "qwen2", "deepseek-llm", "deepseek-coder", "falcon",
                             "starcoder", "refact", "mpt"}) {
        auto type = parse_pre_type(name);
        ASSERT_TRUE(type.ok()) << name;
        std::string joined;
        for (const std::string& w : pre_tokenize(*type, text)) {
            EXPECT_FALSE(w.empty()) << name;
            joined += w;
        }
        EXPECT_EQ(joined, text) << name;
    }
}

TEST(pre_tokenizer, ill_formed_utf8_reads_as_replacement_characters) {
    auto type = parse_pre_type("gpt-2");
    ASSERT_TRUE(type.ok());
    EXPECT_EQ(pre_tokenize(*type,
                           "a\xff"
                           "b"),
              (std::vector<std::string>{"a", "\xef\xbf\xbd", "b"}));
}

TEST(pre_tokenizer, empty_text_has_no_words) {
    for (const char* name : {"default", "gpt-2", "llama3", "deepseek-llm"}) {
        EXPECT_TRUE(pre_tokenize(*parse_pre_type(name), "").empty()) << name;
    }
}

TEST(pre_tokenizer, an_unknown_name_is_an_error_that_lists_the_supported_names) {
    auto type = parse_pre_type("gpt-5");
    ASSERT_FALSE(type.ok());
    for (const char* name : {"gpt-5", "default", "gpt-2", "llama3", "llama-bpe", "deepseek-llm", "deepseek-coder",
                             "falcon", "starcoder", "refact", "mpt", "qwen2"}) {
        EXPECT_NE(type.message().find(name), std::string::npos) << name << " missing in: " << type.message();
    }
}

}  // namespace
}  // namespace troupe::tok
