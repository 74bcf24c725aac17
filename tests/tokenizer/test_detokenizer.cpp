// decode() and the incremental detokenizer on the shared vocabularies.
#include <gtest/gtest.h>

#include "core/gguf/gguf_file.h"
#include "core/tokenizer/incremental_detokenizer.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/utf8.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

std::shared_ptr<const tokenizer> load(const std::string& path) {
    auto file = gguf::gguf_file::open(path);
    EXPECT_TRUE(file.ok()) << (file.ok() ? "" : file.message());
    if (!file) return nullptr;
    auto tok = tokenizer::from_gguf(**file);
    EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.message());
    return tok ? *tok : nullptr;
}

bool is_valid_utf8(const std::string& s) {
    std::string out;
    return tok::sanitize_utf8(s, out, true) == s.size() && out == s;
}

const std::string k_emoji = "\xf0\x9f\x98\x80";  // 😀

// Pushes ids one by one; every piece must be valid UTF-8 on its own.
std::string stream(const std::shared_ptr<const tokenizer>& tok, const std::vector<int32_t>& ids, bool strip = true) {
    incremental_detokenizer detok(tok, strip);
    std::string all;
    for (int32_t id : ids) {
        const std::string piece = detok.push(id);
        EXPECT_TRUE(is_valid_utf8(piece)) << "piece after id " << id;
        all += piece;
    }
    all += detok.flush();
    return all;
}

TEST(detokenizer, spm_byte_fallback_tokens_for_an_emoji_are_held_until_the_character_is_complete) {
    TROUPE_REQUIRE_SHARED(path, "vocab/ggml-vocab-llama-spm.gguf");
    auto tok = load(path);
    ASSERT_NE(tok, nullptr);
    const std::vector<int32_t> ids = tok->encode(k_emoji, false);
    // "▁" then the four byte-fallback tokens <0xF0> <0x9F> <0x98> <0x80> (ids 3 + byte).
    ASSERT_EQ(ids, (std::vector<int32_t>{29871, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80}));
    incremental_detokenizer detok(tok, false);
    EXPECT_EQ(detok.push(ids[0]), " ");
    EXPECT_EQ(detok.push(ids[1]), "");
    EXPECT_EQ(detok.push(ids[2]), "");
    EXPECT_EQ(detok.push(ids[3]), "");
    EXPECT_EQ(detok.n_held_bytes(), 3u);
    EXPECT_EQ(detok.push(ids[4]), k_emoji);
    EXPECT_EQ(detok.flush(), "");
}

TEST(detokenizer, streamed_text_equals_decode_for_both_vocabularies) {
    TROUPE_REQUIRE_SHARED(spm_path, "vocab/ggml-vocab-llama-spm.gguf");
    TROUPE_REQUIRE_SHARED(bpe_path, "vocab/ggml-vocab-gpt-2.gguf");
    const std::string texts[] = {
        "Hello " + k_emoji + " world",
        "\xf0\x9f\x9a\x80 (normal) \xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f (multiple emojis)",
        "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xa8 \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4, F\xc3\xbchrer 1/2 "
        "\xc2\xbd",
        " leading space and trailing  ",
    };
    for (const std::string& path : {spm_path, bpe_path}) {
        auto tok = load(path);
        ASSERT_NE(tok, nullptr);
        for (const std::string& text : texts) {
            for (bool add_bos : {true, false}) {
                const std::vector<int32_t> ids = tok->encode(text, add_bos);
                const std::string decoded = tok->decode(ids);
                EXPECT_EQ(stream(tok, ids), decoded) << path << ": " << text;
                EXPECT_EQ(decoded, text) << path;
            }
        }
    }
}

TEST(detokenizer, gpt2_tokens_that_split_a_character_stream_whole_characters) {
    TROUPE_REQUIRE_SHARED(path, "vocab/ggml-vocab-gpt-2.gguf");
    auto tok = load(path);
    ASSERT_NE(tok, nullptr);
    // 🚀 is 8582 248 222 in GPT-2 (from the shared test vectors): three tokens, one character.
    incremental_detokenizer detok(tok);
    EXPECT_EQ(detok.push(8582), "");
    EXPECT_EQ(detok.push(248), "");
    EXPECT_EQ(detok.push(222), "\xf0\x9f\x9a\x80");
    EXPECT_EQ(detok.push(357), " (");
}

TEST(detokenizer, flush_replaces_an_incomplete_character_and_hopeless_bytes_are_replaced_at_once) {
    TROUPE_REQUIRE_SHARED(path, "vocab/ggml-vocab-llama-spm.gguf");
    auto tok = load(path);
    ASSERT_NE(tok, nullptr);
    incremental_detokenizer detok(tok, false);
    EXPECT_EQ(detok.push(3 + 0xFF), "\xef\xbf\xbd");  // 0xFF never starts a character
    EXPECT_EQ(detok.push(3 + 0xE4), "");
    EXPECT_EQ(detok.push(3 + 0xB8), "");
    EXPECT_EQ(detok.flush(), "\xef\xbf\xbd");
    EXPECT_EQ(detok.n_held_bytes(), 0u);
}

TEST(detokenizer, the_spm_space_prefix_is_dropped_only_at_the_start_of_a_sequence) {
    TROUPE_REQUIRE_SHARED(path, "vocab/ggml-vocab-llama-spm.gguf");
    auto tok = load(path);
    ASSERT_NE(tok, nullptr);
    const std::vector<int32_t> hello_world = {15043, 3186};  // "▁Hello" "▁world"
    const std::vector<int32_t> with_bos = {1, 15043, 3186};
    EXPECT_EQ(tok->decode(hello_world), "Hello world");
    EXPECT_EQ(tok->decode(with_bos), "Hello world");
    EXPECT_EQ(tok->decode(with_bos, true), "<s>Hello world");
    EXPECT_EQ(stream(tok, with_bos), "Hello world");
    EXPECT_EQ(stream(tok, hello_world, false), " Hello world");  // a continuation keeps its spaces
    EXPECT_EQ(tok->token_to_piece(15043), " Hello");
}

TEST(detokenizer, control_tokens_contribute_no_text_unless_asked) {
    TROUPE_REQUIRE_SHARED(path, "vocab/ggml-vocab-gpt-2.gguf");
    auto tok = load(path);
    ASSERT_NE(tok, nullptr);
    const std::vector<int32_t> ids = {15496, 50256, 995};  // "Hello" <|endoftext|> " world"
    EXPECT_EQ(tok->decode(ids), "Hello world");
    EXPECT_EQ(tok->decode(ids, true), "Hello<|endoftext|> world");
    EXPECT_EQ(stream(tok, ids), "Hello world");
    EXPECT_EQ(tok->token_to_piece(50256), "<|endoftext|>");
    EXPECT_EQ(tok->token_to_piece(198), "\n");
}

}  // namespace
}  // namespace troupe
