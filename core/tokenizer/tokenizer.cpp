#include "core/tokenizer/tokenizer.h"

#include <algorithm>

#include "core/gguf/gguf_file.h"
#include "core/log/log.h"
#include "core/tokenizer/bpe_encoder.h"
#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/special_tokens.h"
#include "core/tokenizer/spm_encoder.h"
#include "core/tokenizer/utf8.h"

namespace troupe {
namespace {

constexpr std::string_view k_spm_space = "\xe2\x96\x81";  // U+2581

// "<0x4F>" -> 0x4F, or -1.
int parse_byte_token(std::string_view text) {
    if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
    int value = 0;
    for (char c : text.substr(3, 2)) {
        value <<= 4;
        if (c >= '0' && c <= '9') {
            value |= c - '0';
        } else if (c >= 'A' && c <= 'F') {
            value |= c - 'A' + 10;
        } else if (c >= 'a' && c <= 'f') {
            value |= c - 'a' + 10;
        } else {
            return -1;
        }
    }
    return value;
}

std::string spm_piece(const tok::token_data& t) {
    switch (t.kind) {
        case tok::token_kind::normal: {
            std::string s;
            s.reserve(t.text.size());
            for (size_t i = 0; i < t.text.size();) {
                if (t.text.compare(i, k_spm_space.size(), k_spm_space) == 0) {
                    s += ' ';
                    i += k_spm_space.size();
                } else {
                    s += t.text[i++];
                }
            }
            return s;
        }
        case tok::token_kind::byte: {
            const int b = parse_byte_token(t.text);
            return b >= 0 ? std::string(1, static_cast<char>(b)) : t.text;
        }
        case tok::token_kind::unknown:
        case tok::token_kind::control:
        case tok::token_kind::user_defined:
            return t.text;
        case tok::token_kind::undefined:
        case tok::token_kind::unused:
            return {};
    }
    return {};
}

std::string bpe_piece(const tok::token_data& t) {
    switch (t.kind) {
        case tok::token_kind::normal:
        case tok::token_kind::byte:
            return tok::byte_decode(t.text);
        case tok::token_kind::unknown:
        case tok::token_kind::control:
        case tok::token_kind::user_defined:
            return t.text;
        case tok::token_kind::undefined:
        case tok::token_kind::unused:
            return {};
    }
    return {};
}

}  // namespace

tokenizer::tokenizer(tok::vocab v) : vocab_(std::move(v)) {
    pieces_.reserve(vocab_.tokens.size());
    for (const tok::token_data& t : vocab_.tokens) {
        pieces_.push_back(vocab_.model == tok::vocab_model::spm ? spm_piece(t) : bpe_piece(t));
    }
}

result<std::shared_ptr<const tokenizer>> tokenizer::from_gguf(const gguf::gguf_file& file) {
    auto v = tok::load_vocab(file);
    if (!v) return v.err();
    return from_vocab(std::move(v).value());
}

std::shared_ptr<const tokenizer> tokenizer::from_vocab(tok::vocab v) {
    return std::shared_ptr<const tokenizer>(new tokenizer(std::move(v)));
}

void tokenizer::encode_spm(std::string_view text, bool prefix_space, std::vector<int32_t>& out) const {
    std::string escaped;
    escaped.reserve(text.size() + text.size() / 2 + 3);
    if (prefix_space) escaped += k_spm_space;
    for (char c : text) {
        if (c == ' ') {
            escaped += k_spm_space;
        } else {
            escaped += c;
        }
    }
    tok::spm_encode(vocab_, escaped, out);
}

void tokenizer::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
    const std::vector<uint32_t> cpts = tok::decode_utf8_lenient(text);
    const std::vector<size_t> lengths = tok::pre_tokenize_lengths(vocab_.pre, cpts);
    std::string utf8, encoded;
    size_t pos = 0;
    for (size_t n : lengths) {
        utf8.clear();
        encoded.clear();
        for (size_t i = 0; i < n; ++i) tok::append_utf8(utf8, cpts[pos + i]);
        pos += n;
        tok::append_byte_encoded(encoded, utf8);
        tok::bpe_encode_word(vocab_, encoded, out);
    }
}

std::vector<int32_t> tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos && vocab_.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
    bool after_special = true;  // the start of the text counts as following a special token
    for (const tok::fragment& f : tok::split_special(vocab_, text, parse_special)) {
        if (f.token_id >= 0) {
            out.push_back(f.token_id);
            after_special = true;
            continue;
        }
        if (vocab_.model == tok::vocab_model::spm) {
            encode_spm(f.text, vocab_.add_space_prefix && after_special, out);
        } else {
            encode_bpe(f.text, out);
        }
        after_special = false;
    }
    if (add_bos && vocab_.add_eos && vocab_.eos_id >= 0) out.push_back(vocab_.eos_id);
    if (add_bos && vocab_.add_bos && out.size() >= 2 && out[1] == vocab_.bos_id) {
        TROUPE_LOG_WARN("tokenizer", "the text starts with BOS (id %d) and BOS was added: the prompt has two",
                        vocab_.bos_id);
    }
    return out;
}

const std::string& tokenizer::token_to_piece(int32_t id) const {
    TROUPE_ASSERT(id >= 0 && id < n_vocab(),
                  "token id " + std::to_string(id) + " outside the vocabulary of " + std::to_string(n_vocab()));
    return pieces_[id];
}

std::string_view tokenizer::output_piece(int32_t id, bool strip_leading_space, bool render_special) const {
    if (id < 0 || id >= n_vocab()) return {};
    const tok::token_kind kind = vocab_.tokens[id].kind;
    if (!render_special && (kind == tok::token_kind::control || kind == tok::token_kind::unknown)) return {};
    std::string_view piece = pieces_[id];
    const bool strips = strip_leading_space && vocab_.model == tok::vocab_model::spm && vocab_.add_space_prefix &&
                        kind == tok::token_kind::normal;
    if (strips && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    return piece;
}

std::string tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
    std::string out;
    const bool starts_with_bos = !ids.empty() && ids[0] == vocab_.bos_id && vocab_.bos_id >= 0;
    for (size_t i = 0; i < ids.size(); ++i) {
        const bool first_text = starts_with_bos ? i == 1 : i == 0;
        out += output_piece(ids[i], first_text, render_special);
    }
    return out;
}

bool tokenizer::is_eog(int32_t id) const {
    return std::binary_search(vocab_.eog_ids.begin(), vocab_.eog_ids.end(), id);
}

bool tokenizer::is_control(int32_t id) const {
    return id >= 0 && id < n_vocab() && vocab_.tokens[id].kind == tok::token_kind::control;
}

}  // namespace troupe
