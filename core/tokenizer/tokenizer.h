// tokenizer: text <-> token ids for the vocabularies GGUF files carry (SentencePiece "llama", byte-level
// BPE "gpt2"), compatible with llama.cpp's ids.
//
// encode:  text -> split at special tokens (special_tokens.h) -> for raw text:
//            llama: prefix a space (add_space_prefix, at the start and after each special token), spaces
//                   to U+2581, spm_encoder.h
//            gpt2:  pre_tokenizer.h words -> byte-level alphabet -> bpe_encoder.h per word
//          BOS first and EOS last when the caller asks for them and the metadata says so.
// decode:  each token's piece (token_to_piece), control and unknown tokens left out unless asked for; for
//          SentencePiece the space the encoder prefixed is dropped from the first text token of a sequence
//          (the token at index 0, or index 1 after a BOS), so decode(encode(s, true)) == s.
// A tokenizer is immutable after from_gguf and safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/tokenizer/vocab.h"

namespace troupe::gguf {
class gguf_file;
}

namespace troupe {

class tokenizer {
public:
    // Errors name the file and the key, e.g. "m.gguf: tokenizer.ggml.pre names an unknown pre-tokenizer ...".
    static result<std::shared_ptr<const tokenizer>> from_gguf(const gguf::gguf_file& file);
    // For tests and tools that build a vocabulary themselves.
    static std::shared_ptr<const tokenizer> from_vocab(tok::vocab v);

    // add_bos: add BOS (if the vocabulary has one and its add_bos_token is not false) and EOS (if its
    // add_eos_token is true). parse_special: match control tokens written in the text ("<|eot_id|>");
    // user-defined tokens are always matched.
    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = true) const;

    // The raw bytes of a token: SentencePiece U+2581 as a space and <0xXX> as its byte, byte-level BPE
    // decoded to bytes, control / unknown / user-defined tokens as their text; unused tokens are empty.
    // The bytes need not be valid UTF-8 on their own. Asserts 0 <= id < n_vocab().
    const std::string& token_to_piece(int32_t id) const;

    // The text of a sequence (see above). Ids outside the vocabulary contribute nothing. Raw bytes: may be
    // invalid UTF-8 where the ids are not a whole text; incremental_detokenizer sanitizes.
    std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

    // What one token contributes to decoded text: "" for ids outside the vocabulary and for control and
    // unknown tokens unless render_special; without the leading space if strip_leading_space and the
    // vocabulary prefixes one (SentencePiece). A view into this tokenizer.
    std::string_view output_piece(int32_t id, bool strip_leading_space, bool render_special = false) const;

    int32_t n_vocab() const { return vocab_.n_vocab(); }
    int32_t bos_id() const { return vocab_.bos_id; }  // -1: none
    int32_t eos_id() const { return vocab_.eos_id; }  // -1: none
    // End of generation: EOS, EOT, EOM and end-of-turn tokens (<|eot_id|>, <|im_end|>, ...).
    bool is_eog(int32_t id) const;
    const std::vector<int32_t>& eog_ids() const { return vocab_.eog_ids; }  // sorted
    bool is_control(int32_t id) const;
    std::string_view model_name() const { return vocab_.model_name; }  // "llama" or "gpt2"
    std::string_view pre_name() const { return vocab_.pre_name; }
    const tok::vocab& vocab() const { return vocab_; }

private:
    explicit tokenizer(tok::vocab v);
    void encode_spm(std::string_view text, bool prefix_space, std::vector<int32_t>& out) const;
    void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;

    tok::vocab vocab_;
    std::vector<std::string> pieces_;  // [n_vocab] token_to_piece
};

}  // namespace troupe
