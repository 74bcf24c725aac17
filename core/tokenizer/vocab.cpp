#include "core/tokenizer/vocab.h"

#include <algorithm>
#include <cstdio>

#include "core/gguf/gguf_file.h"
#include "core/log/log.h"
#include "core/tokenizer/byte_level.h"

namespace troupe::tok {
namespace {

constexpr std::string_view k_prefix = "tokenizer.ggml.";

std::string key_of(std::string_view name) {
    return std::string(k_prefix) + std::string(name);
}

error key_error(const gguf::gguf_file& file, std::string_view name, const std::string& what) {
    // An indexed complaint ("[12] is 9, ...") attaches to the key: "tokenizer.ggml.token_type[12] is 9".
    return make_error(file.path() + ": " + key_of(name) + (what.starts_with('[') ? "" : " ") + what);
}

// Texts that end a turn in common chat templates; such tokens end generation as llama.cpp's do.
constexpr std::string_view k_end_of_turn_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",  // DeepSeek
};

status read_id(const gguf::gguf_file& file, std::string_view name, int32_t n_vocab, int32_t& id) {
    const std::string key = key_of(name);
    if (!file.find(key)) return {};
    auto v = file.get_int(key);
    if (!v) return v.err();
    if (*v == -1 || *v == 0xFFFFFFFFLL) {
        id = -1;
        return {};
    }
    if (*v < 0 || *v >= n_vocab) {
        return key_error(file, name,
                         "is " + std::to_string(*v) + ", expected a token id below n_vocab " + std::to_string(n_vocab) +
                             " (or 0xFFFFFFFF for none)");
    }
    id = static_cast<int32_t>(*v);
    return {};
}

status read_flag(const gguf::gguf_file& file, std::string_view name, bool& flag) {
    const std::string key = key_of(name);
    if (!file.find(key)) return {};
    auto v = file.get_bool(key);
    if (!v) return v.err();
    flag = *v;
    return {};
}

status read_tokens(const gguf::gguf_file& file, vocab& v) {
    auto texts = file.get_string_array(key_of("tokens"));
    if (!texts) return texts.err();
    if (texts->empty()) return key_error(file, "tokens", "is empty, expected at least one token");
    const size_t n = texts->size();
    v.tokens.resize(n);
    for (size_t i = 0; i < n; ++i) v.tokens[i].text = std::move((*texts)[i]);

    if (file.find(key_of("scores"))) {
        auto scores = file.get_float_array(key_of("scores"));
        if (!scores) return scores.err();
        if (scores->size() != n) {
            return key_error(file, "scores",
                             "has " + std::to_string(scores->size()) + " entries, expected " + std::to_string(n) +
                                 " (one per token)");
        }
        for (size_t i = 0; i < n; ++i) v.tokens[i].score = (*scores)[i];
    } else if (v.model == vocab_model::spm) {
        return key_error(file, "scores", "is missing; a SentencePiece vocabulary needs one score per token");
    }

    if (file.find(key_of("token_type"))) {
        auto types = file.get_int_array(key_of("token_type"));
        if (!types) return types.err();
        if (types->size() != n) {
            return key_error(file, "token_type",
                             "has " + std::to_string(types->size()) + " entries, expected " + std::to_string(n) +
                                 " (one per token)");
        }
        for (size_t i = 0; i < n; ++i) {
            const int64_t t = (*types)[i];
            if (t < 0 || t > 6) {
                return key_error(
                    file, "token_type",
                    "[" + std::to_string(i) + "] is " + std::to_string(t) +
                        ", expected 0..6 (undefined, normal, unknown, control, user-defined, unused, byte)");
            }
            v.tokens[i].kind = static_cast<token_kind>(t);
        }
    }

    v.token_to_id.reserve(n * 2);
    for (size_t i = 0; i < n; ++i) v.token_to_id[v.tokens[i].text] = static_cast<int32_t>(i);  // the last wins
    return {};
}

status read_merges(const gguf::gguf_file& file, vocab& v) {
    if (!file.find(key_of("merges"))) {
        return key_error(file, "merges", "is missing; a byte-level BPE vocabulary needs its merges");
    }
    auto merges = file.get_string_array(key_of("merges"));
    if (!merges) return merges.err();
    v.merge_ranks.reserve(merges->size() * 2);
    for (size_t i = 0; i < merges->size(); ++i) {
        const std::string& m = (*merges)[i];
        const size_t space = m.find(' ', 1);
        if (space == std::string::npos || space + 1 >= m.size()) {
            return key_error(file, "merges",
                             "[" + std::to_string(i) + "] '" + m + "' is not two token texts separated by a space");
        }
        v.merge_ranks.emplace(m, static_cast<int32_t>(i));  // the first rank of a repeated merge wins
    }
    return {};
}

void find_byte_tokens(vocab& v) {
    v.byte_ids.fill(-1);
    for (int b = 0; b < 256; ++b) {
        if (v.model == vocab_model::spm) {
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", b);
            int32_t id = v.find(name);
            if (id < 0) id = v.find(std::string(1, static_cast<char>(b)));
            v.byte_ids[b] = id;
        } else {
            std::string text;
            const char c = static_cast<char>(b);
            append_byte_encoded(text, std::string_view(&c, 1));
            v.byte_ids[b] = v.find(text);
        }
    }
}

void collect_special(vocab& v) {
    for (int32_t id = 0; id < v.n_vocab(); ++id) {
        const token_data& t = v.tokens[id];
        const bool special =
            t.kind == token_kind::control || t.kind == token_kind::user_defined || t.kind == token_kind::unknown;
        if (special && !t.text.empty()) v.special_ids.push_back(id);
    }
    std::stable_sort(v.special_ids.begin(), v.special_ids.end(),
                     [&](int32_t a, int32_t b) { return v.tokens[a].text.size() > v.tokens[b].text.size(); });

    for (int32_t id : {v.eos_id, v.eot_id, v.eom_id}) {
        if (id >= 0) v.eog_ids.push_back(id);
    }
    for (std::string_view text : k_end_of_turn_texts) {
        const int32_t id = v.find(text);
        if (id < 0) continue;
        const token_kind k = v.tokens[id].kind;
        if (k == token_kind::control || k == token_kind::user_defined) v.eog_ids.push_back(id);
    }
    std::sort(v.eog_ids.begin(), v.eog_ids.end());
    v.eog_ids.erase(std::unique(v.eog_ids.begin(), v.eog_ids.end()), v.eog_ids.end());
}

}  // namespace

result<vocab> load_vocab(const gguf::gguf_file& file) {
    vocab v;
    if (!file.find(key_of("model"))) {
        return key_error(file, "model", "is missing; the file has no tokenizer (expected 'llama' or 'gpt2')");
    }
    auto model = file.get_string(key_of("model"));
    if (!model) return model.err();
    v.model_name = *model;
    if (v.model_name == "llama") {
        v.model = vocab_model::spm;
    } else if (v.model_name == "gpt2") {
        v.model = vocab_model::bpe;
    } else {
        return key_error(file, "model", "is '" + v.model_name + "', an unsupported tokenizer (supported: llama, gpt2)");
    }

    v.pre_name = "default";
    if (file.find(key_of("pre"))) {
        auto pre = file.get_string(key_of("pre"));
        if (!pre) return pre.err();
        v.pre_name = *pre;
    }
    if (v.model == vocab_model::bpe) {
        auto pre = parse_pre_type(v.pre_name);
        if (!pre) return key_error(file, "pre", "names an " + pre.message());
        v.pre = *pre;
    }

    if (status s = read_tokens(file, v); !s) return s.err();
    if (v.model == vocab_model::bpe) {
        if (status s = read_merges(file, v); !s) return s.err();
    }

    const int32_t n = v.n_vocab();
    if (v.model == vocab_model::spm) {
        v.unk_id = n > 0 ? 0 : -1;
        v.bos_id = n > 1 ? 1 : -1;
        v.eos_id = n > 2 ? 2 : -1;
        v.add_bos = true;
        v.add_space_prefix = true;
    } else {
        v.add_bos = pre_adds_bos_by_default(v.pre);
        v.ignore_merges = pre_ignores_merges(v.pre);
    }
    const std::pair<std::string_view, int32_t*> ids[] = {
        {"bos_token_id", &v.bos_id},     {"eos_token_id", &v.eos_id}, {"unknown_token_id", &v.unk_id},
        {"padding_token_id", &v.pad_id}, {"eot_token_id", &v.eot_id}, {"eom_token_id", &v.eom_id},
    };
    for (const auto& [name, id] : ids) {
        if (status s = read_id(file, name, n, *id); !s) return s.err();
    }
    const std::pair<std::string_view, bool*> flags[] = {
        {"add_bos_token", &v.add_bos}, {"add_eos_token", &v.add_eos}, {"add_space_prefix", &v.add_space_prefix}};
    for (const auto& [name, flag] : flags) {
        if (status s = read_flag(file, name, *flag); !s) return s.err();
    }
    // A flag the file sets needs its token; a default without one is dropped.
    if (v.add_bos && v.bos_id < 0) {
        if (file.find(key_of("add_bos_token"))) {
            return key_error(file, "add_bos_token", "is true but the vocabulary has no BOS token (bos_token_id)");
        }
        v.add_bos = false;
    }
    if (v.add_eos && v.eos_id < 0) {
        return key_error(file, "add_eos_token", "is true but the vocabulary has no EOS token (eos_token_id)");
    }

    find_byte_tokens(v);
    collect_special(v);
    TROUPE_LOG_DEBUG("tokenizer", "%s: %s vocabulary, %d tokens, %zu merges, pre '%s', %zu special tokens",
                     file.path().c_str(), v.model_name.c_str(), n, v.merge_ranks.size(), v.pre_name.c_str(),
                     v.special_ids.size());
    return v;
}

}  // namespace troupe::tok
