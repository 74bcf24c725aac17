// Special-token parsing, BOS/EOS rules, and the errors for bad tokenizer metadata (files made with the
// GGUF writer from the shared vocabularies or from scratch).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/gguf/gguf_file.h"
#include "core/gguf/gguf_writer.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

const std::string k_sp = "\xe2\x96\x81";  // U+2581

std::string temp_path(const std::string& name) {
    return (std::filesystem::path(::testing::TempDir()) / ("troupe_tok_" + name + ".gguf")).string();
}

// Writes the file and loads its tokenizer.
result<std::shared_ptr<const tokenizer>> load_written(const gguf::gguf_writer& w, const std::string& name) {
    const std::string path = temp_path(name);
    if (status s = w.write(path); !s) return s.err();
    auto file = gguf::gguf_file::open(path);
    if (!file) return file.err();
    return tokenizer::from_gguf(**file);
}

gguf::gguf_writer copy_of(const std::string& path) {
    auto file = gguf::gguf_file::open(path);
    EXPECT_TRUE(file.ok()) << (file.ok() ? "" : file.message());
    gguf::gguf_writer w;
    if (file) w.copy_metadata(**file, "tokenizer.");
    return w;
}

// A small SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, then words, a control token and two
// user-defined tokens where one is a prefix of the other.
gguf::gguf_writer tiny_spm() {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        tokens.push_back(name);
        types.push_back(6);
    }
    const std::pair<std::string, int32_t> extra[] = {
        {k_sp, 1},        {"a", 1},          {"b", 1},   {k_sp + "a", 1}, {"ab", 1},
        {k_sp + "ab", 1}, {"<|eot_id|>", 3}, {"<x>", 4}, {"<x>y", 4},
    };
    for (const auto& [text, type] : extra) {
        tokens.push_back(text);
        types.push_back(type);
    }
    std::vector<float> scores(tokens.size(), 0.0f);
    for (size_t i = 259; i < tokens.size(); ++i) scores[i] = -static_cast<float>(tokens[i].size());
    gguf::gguf_writer w;
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_f32_array("tokenizer.ggml.scores", scores);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    return w;
}

constexpr int32_t k_tiny_sp = 259, k_tiny_a = 260, k_tiny_b = 261, k_tiny_sp_a = 262, k_tiny_ab = 263,
                  k_tiny_sp_ab = 264, k_tiny_eot = 265, k_tiny_x = 266, k_tiny_xy = 267;

TEST(special_tokens, control_tokens_in_the_text_are_single_ids_when_parsing_special) {
    TROUPE_REQUIRE_SHARED(path, "vocab/ggml-vocab-llama-spm.gguf");
    auto file = gguf::gguf_file::open(path);
    ASSERT_TRUE(file.ok());
    auto tok = tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok.ok());
    // After a special token the text gets the space prefix again, as at the start.
    EXPECT_EQ((*tok)->encode("<s>Hello</s>", false, true), (std::vector<int32_t>{1, 15043, 2}));
    const std::vector<int32_t> literal = (*tok)->encode("<s>Hello</s>", false, false);
    EXPECT_GT(literal.size(), 3u);
    EXPECT_EQ(std::count(literal.begin(), literal.end(), 1), 0);
    EXPECT_EQ((*tok)->decode(literal), "<s>Hello</s>");
}

TEST(special_tokens, gpt2_end_of_text_is_parsed_only_when_asked) {
    TROUPE_REQUIRE_SHARED(path, "vocab/ggml-vocab-gpt-2.gguf");
    auto file = gguf::gguf_file::open(path);
    ASSERT_TRUE(file.ok());
    auto tok = tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok.ok());
    EXPECT_EQ((*tok)->encode("Hello<|endoftext|> world", false, true), (std::vector<int32_t>{15496, 50256, 995}));
    const std::vector<int32_t> literal = (*tok)->encode("Hello<|endoftext|> world", false, false);
    EXPECT_EQ(std::count(literal.begin(), literal.end(), 50256), 0);
    EXPECT_EQ((*tok)->decode(literal), "Hello<|endoftext|> world");
}

TEST(special_tokens, longer_special_tokens_win_and_user_defined_tokens_are_always_matched) {
    auto tok = load_written(tiny_spm(), "tiny_spm");
    ASSERT_TRUE(tok.ok()) << tok.message();
    const auto& t = **tok;
    EXPECT_EQ(t.encode("ab", false), (std::vector<int32_t>{k_tiny_sp_ab}));
    EXPECT_EQ(t.encode("a b", false), (std::vector<int32_t>{k_tiny_sp_a, k_tiny_sp, k_tiny_b}));
    EXPECT_EQ(t.encode("<x>y<x>", false), (std::vector<int32_t>{k_tiny_xy, k_tiny_x}));
    EXPECT_EQ(t.encode("a<|eot_id|>b", false, true),
              (std::vector<int32_t>{k_tiny_sp_a, k_tiny_eot, k_tiny_sp, k_tiny_b}));
    // Without parse_special the control token is text; the user-defined one is still matched.
    const std::vector<int32_t> literal = t.encode("<|eot_id|><x>", false, false);
    EXPECT_EQ(std::count(literal.begin(), literal.end(), k_tiny_eot), 0);
    EXPECT_EQ(literal.back(), k_tiny_x);
    EXPECT_TRUE(t.is_eog(k_tiny_eot));
    EXPECT_TRUE(t.is_eog(2));
    EXPECT_FALSE(t.is_eog(k_tiny_x));
    (void)k_tiny_a;
    (void)k_tiny_ab;
}

TEST(special_tokens, characters_outside_the_vocabulary_fall_back_to_byte_tokens) {
    auto tok = load_written(tiny_spm(), "tiny_spm_bytes");
    ASSERT_TRUE(tok.ok()) << tok.message();
    // "▁" then 'z' (<0x7A>) and 'é' (<0xC3> <0xA9>).
    EXPECT_EQ((*tok)->encode("z\xc3\xa9", false), (std::vector<int32_t>{k_tiny_sp, 3 + 0x7A, 3 + 0xC3, 3 + 0xA9}));
    EXPECT_EQ((*tok)->decode((*tok)->encode("z\xc3\xa9", true)), "z\xc3\xa9");
}

TEST(special_tokens, bos_and_eos_follow_the_metadata_flags) {
    gguf::gguf_writer w = tiny_spm();
    w.set_bool("tokenizer.ggml.add_eos_token", true);
    auto tok = load_written(w, "tiny_spm_eos");
    ASSERT_TRUE(tok.ok()) << tok.message();
    EXPECT_EQ((*tok)->encode("a", true), (std::vector<int32_t>{1, k_tiny_sp_a, 2}));
    EXPECT_EQ((*tok)->encode("a", false), (std::vector<int32_t>{k_tiny_sp_a}));

    w.set_bool("tokenizer.ggml.add_bos_token", false);
    w.set_bool("tokenizer.ggml.add_eos_token", false);
    w.set_bool("tokenizer.ggml.add_space_prefix", false);
    auto plain = load_written(w, "tiny_spm_plain");
    ASSERT_TRUE(plain.ok()) << plain.message();
    EXPECT_EQ((*plain)->encode("a", true), (std::vector<int32_t>{k_tiny_a}));
}

TEST(special_tokens, empty_text_encodes_to_bos_alone_or_nothing) {
    auto tok = load_written(tiny_spm(), "tiny_spm_empty");
    ASSERT_TRUE(tok.ok()) << tok.message();
    EXPECT_EQ((*tok)->encode("", true), (std::vector<int32_t>{1}));
    EXPECT_TRUE((*tok)->encode("", false).empty());
}

struct metadata_error_case {
    const char* name;
    void (*edit)(gguf::gguf_writer& w);
    std::vector<std::string> message_parts;
};

TEST(tokenizer_errors, bad_metadata_is_an_error_naming_the_file_and_the_key) {
    TROUPE_REQUIRE_SHARED(spm_path, "vocab/ggml-vocab-llama-spm.gguf");
    TROUPE_REQUIRE_SHARED(bpe_path, "vocab/ggml-vocab-gpt-2.gguf");
    const metadata_error_case spm_cases[] = {
        {"unknown_model",
         [](gguf::gguf_writer& w) { w.set_string("tokenizer.ggml.model", "bert"); },
         {"tokenizer.ggml.model", "'bert'", "llama, gpt2"}},
        {"no_model",
         [](gguf::gguf_writer& w) { w.remove("tokenizer.ggml.model"); },
         {"tokenizer.ggml.model", "missing"}},
        {"no_tokens", [](gguf::gguf_writer& w) { w.remove("tokenizer.ggml.tokens"); }, {"tokenizer.ggml.tokens"}},
        {"short_scores",
         [](gguf::gguf_writer& w) {
             w.set_f32_array("tokenizer.ggml.scores", {0.0f, 1.0f});
         },
         {"tokenizer.ggml.scores", "has 2 entries, expected 32000"}},
        {"short_types",
         [](gguf::gguf_writer& w) { w.set_i32_array("tokenizer.ggml.token_type", {1}); },
         {"tokenizer.ggml.token_type", "has 1 entries"}},
        {"bos_out_of_range",
         [](gguf::gguf_writer& w) { w.set_u32("tokenizer.ggml.bos_token_id", 32000); },
         {"tokenizer.ggml.bos_token_id", "32000", "below n_vocab 32000"}},
        {"add_bos_wrong_type",
         [](gguf::gguf_writer& w) { w.set_string("tokenizer.ggml.add_bos_token", "yes"); },
         {"tokenizer.ggml.add_bos_token"}},
    };
    for (const metadata_error_case& c : spm_cases) {
        gguf::gguf_writer w = copy_of(spm_path);
        c.edit(w);
        auto tok = load_written(w, c.name);
        ASSERT_FALSE(tok.ok()) << c.name;
        EXPECT_NE(tok.message().find(temp_path(c.name)), std::string::npos) << c.name << ": " << tok.message();
        for (const std::string& part : c.message_parts) {
            EXPECT_NE(tok.message().find(part), std::string::npos)
                << c.name << ": '" << part << "' not in " << tok.message();
        }
    }
    const metadata_error_case bpe_cases[] = {
        {"unknown_pre",
         [](gguf::gguf_writer& w) { w.set_string("tokenizer.ggml.pre", "gpt-5"); },
         {"tokenizer.ggml.pre", "gpt-5", "llama3", "qwen2", "deepseek-coder"}},
        {"no_merges", [](gguf::gguf_writer& w) { w.remove("tokenizer.ggml.merges"); }, {"tokenizer.ggml.merges"}},
        {"bad_merge",
         [](gguf::gguf_writer& w) { w.set_string_array("tokenizer.ggml.merges", {"ab"}); },
         {"tokenizer.ggml.merges[0]", "'ab'"}},
    };
    for (const metadata_error_case& c : bpe_cases) {
        gguf::gguf_writer w = copy_of(bpe_path);
        c.edit(w);
        auto tok = load_written(w, c.name);
        ASSERT_FALSE(tok.ok()) << c.name;
        for (const std::string& part : c.message_parts) {
            EXPECT_NE(tok.message().find(part), std::string::npos)
                << c.name << ": '" << part << "' not in " << tok.message();
        }
    }
}

TEST(tokenizer_errors, a_copied_vocabulary_loads_and_a_missing_pre_means_default) {
    TROUPE_REQUIRE_SHARED(bpe_path, "vocab/ggml-vocab-gpt-2.gguf");
    gguf::gguf_writer w = copy_of(bpe_path);
    auto same = load_written(w, "gpt2_copy");
    ASSERT_TRUE(same.ok()) << same.message();
    EXPECT_EQ((*same)->encode("Hello world", false), (std::vector<int32_t>{15496, 995}));
    w.remove("tokenizer.ggml.pre");
    auto def = load_written(w, "gpt2_default_pre");
    ASSERT_TRUE(def.ok()) << def.message();
    EXPECT_EQ((*def)->pre_name(), "default");
    w.set_string("tokenizer.ggml.pre", "llama3");
    auto l3 = load_written(w, "gpt2_llama3_pre");
    ASSERT_TRUE(l3.ok()) << l3.message();
    EXPECT_EQ((*l3)->pre_name(), "llama3");
}

}  // namespace
}  // namespace troupe
