// text_codec: what the actors need from a tokenizer, declared here so that they do not depend on a
// particular one. tokenizer_codec.h adapts core/tokenizer; tests use a byte-level fake.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

// Turns a stream of token ids into text, holding back bytes that do not yet form whole characters.
class text_decoder {
public:
    virtual ~text_decoder() = default;
    virtual std::string push(int32_t id) = 0;
    virtual std::string flush() = 0;
};

class text_codec {
public:
    virtual ~text_codec() = default;
    virtual int32_t n_vocab() const = 0;
    // The prompt's ids, with BOS where the model expects one.
    virtual std::vector<int32_t> encode(std::string_view text) const = 0;
    virtual std::unique_ptr<text_decoder> make_decoder() const = 0;
    // A decoder that also writes these special tokens' texts, which make_decoder()'s leaves out (a tool-call
    // format's markers); a codec without special tokens gives its plain decoder.
    virtual std::unique_ptr<text_decoder> make_decoder_showing(const std::vector<std::string>& special_texts) const {
        (void)special_texts;
        return make_decoder();
    }
    // End-of-generation ids (EOS, EOT, ...).
    virtual std::vector<int32_t> eog_ids() const = 0;
    // A token's raw bytes (may be part of a UTF-8 sequence), for logprobs; empty where unknown.
    virtual std::string piece(int32_t id) const {
        (void)id;
        return {};
    }
};

}  // namespace troupe
