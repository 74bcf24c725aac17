#include "core/json/precise_parse.h"

#include <charconv>
#include <vector>

namespace troupe::json_text {
namespace {

// The number tokens of a JSON text in order (outside strings), as the spans they take.
std::vector<std::string_view> number_tokens(std::string_view text) {
    std::vector<std::string_view> out;
    for (size_t k = 0; k < text.size();) {
        const char c = text[k];
        if (c == '"') {
            for (++k; k < text.size() && text[k] != '"'; ++k) {
                if (text[k] == '\\') ++k;
            }
            ++k;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            const size_t start = k;
            while (k < text.size() && (text[k] == '-' || text[k] == '+' || text[k] == '.' || text[k] == 'e' ||
                                       text[k] == 'E' || (text[k] >= '0' && text[k] <= '9'))) {
                ++k;
            }
            out.push_back(text.substr(start, k - start));
        } else {
            ++k;
        }
    }
    return out;
}

// Visits the numbers of v in document order (Boost keeps an object's keys in the text's order), rereading
// each double from its token. False when the counts do not line up (duplicate keys dropped one): then
// nothing more is changed.
bool reread(boost::json::value& v, const std::vector<std::string_view>& tokens, size_t& next) {
    switch (v.kind()) {
        case boost::json::kind::object:
            for (auto& kv : v.get_object()) {
                if (!reread(kv.value(), tokens, next)) return false;
            }
            return true;
        case boost::json::kind::array:
            for (auto& item : v.get_array()) {
                if (!reread(item, tokens, next)) return false;
            }
            return true;
        case boost::json::kind::double_: {
            if (next >= tokens.size()) return false;
            const std::string_view t = tokens[next++];
            double d = 0;
            const auto [end, err] = std::from_chars(t.data(), t.data() + t.size(), d);
            if (err == std::errc() && end == t.data() + t.size()) v = d;
            return true;
        }
        case boost::json::kind::int64:
        case boost::json::kind::uint64:
            return next++ < tokens.size();
        case boost::json::kind::string:
        case boost::json::kind::bool_:
        case boost::json::kind::null:
            return true;
    }
    return true;
}

}  // namespace

boost::json::value parse_precise(std::string_view text, boost::system::error_code& ec,
                                 const boost::json::parse_options& options) {
    boost::json::value v = boost::json::parse(text, ec, {}, options);
    if (ec) return v;
    const std::vector<std::string_view> tokens = number_tokens(text);
    size_t next = 0;
    boost::json::value fixed = v;
    if (reread(fixed, tokens, next) && next == tokens.size()) return fixed;
    return v;
}

}  // namespace troupe::json_text
