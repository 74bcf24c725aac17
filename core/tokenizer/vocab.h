// vocab: a tokenizer vocabulary as GGUF metadata describes it (the tokenizer.ggml.* keys), validated.
//
// Read: model ("llama": SentencePiece, "gpt2": byte-level BPE), tokens, scores, token_type, merges, pre, the
// special ids (bos, eos, unknown, padding, eot, eom; 0xFFFFFFFF or -1 means "none") and the add_bos_token,
// add_eos_token and add_space_prefix flags. Defaults follow llama.cpp: SentencePiece has BOS 1, EOS 2,
// UNK 0, adds BOS and a space prefix; BPE adds neither (llama3-style pre-tokenizers add BOS). Every error
// names the file and the key: "m.gguf: tokenizer.ggml.scores has 31999 entries, expected 32000 (one per token)".
//
// Invariants after loading: tokens.size() == n_vocab > 0, every id member is -1 or in [0, n_vocab),
// token_to_id maps each token text to its lowest id, special_ids is sorted by decreasing text length.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/result.h"
#include "core/tokenizer/pre_tokenizer.h"

namespace troupe::gguf {
class gguf_file;
}

namespace troupe::tok {

enum class vocab_model { spm, bpe };

// tokenizer.ggml.token_type values.
enum class token_kind : uint8_t {
    undefined = 0,
    normal = 1,
    unknown = 2,
    control = 3,
    user_defined = 4,
    unused = 5,
    byte = 6
};

struct token_data {
    std::string text;  // as stored: SentencePiece spells spaces U+2581, byte-level BPE spells bytes as codepoints
    float score = 0.0f;
    token_kind kind = token_kind::normal;
};

// Hash for maps keyed by std::string that can be probed with a std::string_view.
struct string_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using string_map = std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>>;

struct vocab {
    vocab_model model = vocab_model::spm;
    std::string model_name;  // "llama" or "gpt2"
    std::string pre_name;    // tokenizer.ggml.pre, "default" where absent
    pre_type pre = pre_type::default_bpe;

    std::vector<token_data> tokens;  // [n_vocab]
    string_map token_to_id;
    string_map merge_ranks;  // BPE: "left right" -> rank (position in tokenizer.ggml.merges)

    int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1, eot_id = -1, eom_id = -1;
    bool add_bos = false;
    bool add_eos = false;
    bool add_space_prefix = false;
    bool ignore_merges = false;  // BPE: a word that is a whole token is not merged (llama3)

    std::vector<int32_t> special_ids;   // control, user-defined and unknown tokens, longest text first
    std::vector<int32_t> eog_ids;       // end of generation: eos, eot, eom and known end-of-turn texts
    std::array<int32_t, 256> byte_ids;  // the token for each raw byte (<0xXX> or the byte-level char), -1: none

    int32_t n_vocab() const { return static_cast<int32_t>(tokens.size()); }
    int32_t find(std::string_view text) const {
        auto it = token_to_id.find(text);
        return it == token_to_id.end() ? -1 : it->second;
    }
};

// Reads and validates the vocabulary in a GGUF file's metadata.
result<vocab> load_vocab(const gguf::gguf_file& file);

}  // namespace troupe::tok
