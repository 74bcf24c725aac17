#include "core/gguf/target_fingerprint.h"

#include <cstdint>
#include <cstdio>

namespace troupe {
namespace {

struct fnv1a64 {
    uint64_t h = 0xcbf29ce484222325ull;
    void add(const std::string& s) {
        for (unsigned char c : s) {
            h ^= c;
            h *= 0x100000001b3ull;
        }
        h ^= 0;
        h *= 0x100000001b3ull;
    }
};

}  // namespace

result<std::string> target_fingerprint(const gguf::gguf_file& file) {
    auto tokens = file.get_string_array("tokenizer.ggml.tokens");
    if (!tokens.ok()) return tokens.err();
    const std::string arch = file.string_or("general.architecture", "llama");
    fnv1a64 f;
    for (const std::string& t : *tokens) f.add(t);
    for (const char* key : {".embedding_length", ".block_count", ".attention.head_count", ".attention.head_count_kv",
                            ".feed_forward_length"}) {
        f.add(std::to_string(file.uint_or(arch + key, 0)));
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(f.h));
    return std::string(hex);
}

}  // namespace troupe
