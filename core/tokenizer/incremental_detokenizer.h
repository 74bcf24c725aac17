// incremental_detokenizer: turns a stream of token ids into a stream of valid UTF-8 text.
//
// A token may end inside a multi-byte character (byte-fallback tokens <0xF0><0x9F><0x98><0x80> spell one
// emoji; byte-level BPE splits characters too), so push() returns only complete characters and holds back
// an incomplete tail until later tokens finish it. Bytes that cannot become a character are replaced by
// U+FFFD at once; flush() replaces a tail still held back. For ids that decode to valid UTF-8 the
// concatenation of push() results and flush() equals tokenizer::decode(ids) (with the same leading-space
// rule: see strip_leading_space). Not thread-safe: one per stream.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace troupe {

class incremental_detokenizer {
public:
    // strip_leading_space: the ids pushed are a whole sequence from its start (BOS or the first text
    // token first), so the SentencePiece space prefix is dropped as decode() drops it. Pass false when
    // pushing only generated tokens that continue a prompt, whose leading spaces are real.
    explicit incremental_detokenizer(std::shared_ptr<const tokenizer> tok, bool strip_leading_space = true);

    // These control tokens are written as their text too (others are left out, as decode() leaves them).
    void show_control_tokens(std::vector<int32_t> ids);

    // The text that became complete with this token (possibly empty).
    std::string push(int32_t id);
    // Whatever is still held back, with an incomplete character replaced by U+FFFD; then starts clean
    // (the leading-space rule does not restart).
    std::string flush();

    size_t n_pushed() const { return n_pushed_; }
    size_t n_held_bytes() const { return held_.size(); }

private:
    std::shared_ptr<const tokenizer> tok_;
    bool strip_leading_space_;
    bool first_was_bos_ = false;
    size_t n_pushed_ = 0;
    std::string held_;            // bytes of an incomplete character
    std::vector<int32_t> shown_;  // sorted
};

}  // namespace troupe
