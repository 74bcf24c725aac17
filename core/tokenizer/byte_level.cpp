#include "core/tokenizer/byte_level.h"

#include <array>

#include "core/tokenizer/utf8.h"

namespace troupe::tok {
namespace {

bool maps_to_itself(uint32_t b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct byte_tables {
    std::array<uint32_t, 256> to_cpt{};
    std::array<std::string, 256> to_utf8;
    std::array<int16_t, 0x100 + 68> from_cpt{};  // -1 where the codepoint stands for no byte
};

const byte_tables k_tables = [] {
    byte_tables t;
    uint32_t next = 0x100;
    t.from_cpt.fill(-1);
    for (uint32_t b = 0; b < 256; ++b) {
        t.to_cpt[b] = maps_to_itself(b) ? b : next++;
        append_utf8(t.to_utf8[b], t.to_cpt[b]);
        t.from_cpt[t.to_cpt[b]] = static_cast<int16_t>(b);
    }
    return t;
}();

}  // namespace

uint32_t byte_to_codepoint(uint8_t byte) {
    return k_tables.to_cpt[byte];
}

int codepoint_to_byte(uint32_t cpt) {
    return cpt < k_tables.from_cpt.size() ? k_tables.from_cpt[cpt] : -1;
}

void append_byte_encoded(std::string& out, std::string_view bytes) {
    for (char c : bytes) out += k_tables.to_utf8[static_cast<uint8_t>(c)];
}

std::string byte_decode(std::string_view token_text) {
    std::string out;
    out.reserve(token_text.size());
    for (uint32_t cpt : decode_utf8_lenient(token_text)) {
        const int b = codepoint_to_byte(cpt);
        if (b >= 0) {
            out.push_back(static_cast<char>(b));
        } else {
            append_utf8(out, cpt);
        }
    }
    return out;
}

}  // namespace troupe::tok
