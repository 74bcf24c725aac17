#include "core/tokenizer/utf8.h"

namespace troupe::tok {
namespace {

// One lenient read at text[pos]; returns the codepoint and advances pos, or returns k_replacement_char
// and advances by one byte where the sequence is ill-formed.
uint32_t read_lenient(std::string_view text, size_t& pos) {
    const auto b = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
    const uint8_t b0 = b(pos);
    if (b0 < 0x80) {
        pos += 1;
        return b0;
    }
    size_t n = 0;
    uint32_t cpt = 0;
    if ((b0 & 0xE0) == 0xC0) {
        n = 2;
        cpt = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
        n = 3;
        cpt = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
        n = 4;
        cpt = b0 & 0x07;
    } else {
        pos += 1;  // a continuation byte or 0xF8..0xFF where a sequence should start
        return k_replacement_char;
    }
    if (pos + n > text.size()) {
        pos += 1;
        return k_replacement_char;
    }
    for (size_t i = 1; i < n; ++i) {
        if ((b(pos + i) & 0xC0) != 0x80) {
            pos += 1;
            return k_replacement_char;
        }
        cpt = (cpt << 6) | (b(pos + i) & 0x3F);
    }
    pos += n;
    return cpt;
}

}  // namespace

std::vector<uint32_t> decode_utf8_lenient(std::string_view text) {
    std::vector<uint32_t> cpts;
    cpts.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) cpts.push_back(read_lenient(text, pos));
    return cpts;
}

void append_utf8(std::string& out, uint32_t cpt) {
    if (cpt < 0x80) {
        out.push_back(static_cast<char>(cpt));
    } else if (cpt < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    } else if (cpt < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    }
}

size_t sanitize_utf8(std::string_view in, std::string& out, bool final) {
    size_t pos = 0;
    while (pos < in.size()) {
        const uint8_t b0 = static_cast<uint8_t>(in[pos]);
        if (b0 < 0x80) {
            out.push_back(static_cast<char>(b0));
            ++pos;
            continue;
        }
        // Expected length and the allowed range of the second byte (Unicode Table 3-7).
        size_t n = 0;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b0 >= 0xC2 && b0 <= 0xDF) {
            n = 2;
        } else if (b0 >= 0xE0 && b0 <= 0xEF) {
            n = 3;
            if (b0 == 0xE0) lo = 0xA0;
            if (b0 == 0xED) hi = 0x9F;
        } else if (b0 >= 0xF0 && b0 <= 0xF4) {
            n = 4;
            if (b0 == 0xF0) lo = 0x90;
            if (b0 == 0xF4) hi = 0x8F;
        } else {
            append_utf8(out, k_replacement_char);
            ++pos;
            continue;
        }
        size_t good = 1;  // bytes of the sequence that are well-formed so far
        while (good < n && pos + good < in.size()) {
            const uint8_t b = static_cast<uint8_t>(in[pos + good]);
            const bool ok = good == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
            if (!ok) break;
            ++good;
        }
        if (good == n) {
            out.append(in.substr(pos, n));
            pos += n;
        } else if (pos + good == in.size() && !final) {
            return pos;  // an incomplete tail: keep it for later bytes
        } else {
            append_utf8(out, k_replacement_char);  // the maximal ill-formed subpart
            pos += good;
        }
    }
    return pos;
}

}  // namespace troupe::tok
