// Values as JSON text, byte for byte as Python's json.dumps writes them (the tojson filter of transformers'
// chat template environment calls json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys)): ", " and ": " on one line, "," and newlines with an indent, floats as Python's repr
// (NaN, Infinity), control characters as \u00XX, non-ASCII text unescaped unless ensure_ascii.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/chat/jinja/evaluator.h"

namespace troupe::jinja {
namespace {

void append_hex4(std::string& out, uint32_t u) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u%04x", u & 0xFFFFu);
    out += buf;
}

void quote(std::string& out, std::string_view s, bool ensure_ascii) {
    out += '"';
    for (size_t k = 0; k < s.size(); ++k) {
        const auto c = static_cast<unsigned char>(s[k]);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20) {
                    append_hex4(out, c);
                } else if (c >= 0x80 && ensure_ascii) {
                    const size_t n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
                    uint32_t cp = n == 1 ? c : (c & (0x7F >> n));
                    for (size_t j = 1; j < n && k + j < s.size(); ++j) {
                        cp = (cp << 6) | (static_cast<unsigned char>(s[k + j]) & 0x3F);
                    }
                    k += n - 1;
                    if (cp >= 0x10000) {
                        cp -= 0x10000;
                        append_hex4(out, 0xD800 + (cp >> 10));
                        append_hex4(out, 0xDC00 + (cp & 0x3FF));
                    } else {
                        append_hex4(out, cp);
                    }
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    out += '"';
}

class json_writer {
public:
    explicit json_writer(const json_dump_options& o) : o_(o) {
        item_sep_ = o.item_separator ? *o.item_separator : (o.indent ? "," : ", ");
    }

    void write(const value& v, int level) {
        switch (v.kind) {
            case value_kind::none:
                out_ += "null";
                return;
            case value_kind::boolean:
                out_ += v.b ? "true" : "false";
                return;
            case value_kind::integer:
                out_ += std::to_string(v.i);
                return;
            case value_kind::floating:
                if (std::isnan(v.f)) {
                    out_ += "NaN";
                } else if (std::isinf(v.f)) {
                    out_ += v.f > 0 ? "Infinity" : "-Infinity";
                } else {
                    out_ += float_repr(v.f);
                }
                return;
            case value_kind::string:
                quote(out_, v.s, o_.ensure_ascii);
                return;
            case value_kind::list:
            case value_kind::tuple:
                out_ += '[';
                for (size_t k = 0; k < v.l->size(); ++k) {
                    separate(k, level + 1);
                    write((*v.l)[k], level + 1);
                }
                close(']', v.l->empty(), level);
                return;
            case value_kind::dict: {
                std::vector<const std::pair<std::string, value>*> items;
                for (const auto& kv : v.d->items) items.push_back(&kv);
                if (o_.sort_keys) {
                    // Python sorts the keys themselves (ints as numbers), before they become text.
                    std::stable_sort(items.begin(), items.end(),
                                     [](auto* a, auto* b) { return less(key_value(a->first), key_value(b->first)); });
                }
                out_ += '{';
                for (size_t k = 0; k < items.size(); ++k) {
                    separate(k, level + 1);
                    // json.dumps writes a key that is no string as its JSON text: 0 -> "0", None -> "null".
                    const value key = key_value(items[k]->first);
                    quote(out_, key.is_string() ? key.s : to_json(key, {}), o_.ensure_ascii);
                    out_ += o_.key_separator;
                    write(items[k]->second, level + 1);
                }
                close('}', items.empty(), level);
                return;
            }
            case value_kind::undefined:
            case value_kind::ns:
            case value_kind::callable:
                break;
        }
        throw render_error("Object of type " + type_name(v) + " is not JSON serializable");
    }

    std::string take() { return std::move(out_); }

private:
    const json_dump_options& o_;
    std::string item_sep_;
    std::string out_;

    void newline(int level) {
        out_ += '\n';
        for (int k = 0; k < level; ++k) out_ += *o_.indent;
    }
    void separate(size_t k, int level) {
        if (k > 0) out_ += item_sep_;
        if (o_.indent) newline(level);
    }
    void close(char c, bool empty, int level) {
        if (!empty && o_.indent) newline(level);
        out_ += c;
    }
};

}  // namespace

std::string to_json(const value& v, const json_dump_options& options) {
    json_writer w(options);
    w.write(v, 0);
    return w.take();
}

}  // namespace troupe::jinja
