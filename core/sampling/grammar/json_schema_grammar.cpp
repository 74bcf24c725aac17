// Each schema node becomes one rule; shared pieces (whitespace, strings, numbers, any value) are made
// once. Bounded repetition x{min,max} is min copies of x then a chain opt_k ::= () | x opt_{k-1};
// unbounded is star ::= () | x star (a tail call: the matcher's stack does not grow with it).
// Objects with named properties: P(i, after) ::= the rest of the members from property i, where
// `after` says whether a member was already written (so a comma comes first); an optional property
// is the alternative of having it or not, so every subset in schema order is accepted, with 2(k+1)
// rules for k properties.
#include "core/sampling/grammar/json_schema_grammar.h"

#include "core/sampling/grammar/integer_range_grammar.h"
#include "core/sampling/grammar/json_schema_all_of.h"
#include "core/sampling/grammar/regex_grammar.h"

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <utility>

namespace troupe::grammar {
namespace json = boost::json;
namespace {

byte_set range(unsigned lo, unsigned hi) {
    byte_set s;
    for (unsigned c = lo; c <= hi; ++c) s.set(c);
    return s;
}

byte_set chars(std::string_view cs) {
    byte_set s;
    for (char c : cs) s.set(static_cast<unsigned char>(c));
    return s;
}

class builder {
public:
    builder(const json::value* root, const json_grammar_options& o) : root_(root), o_(o) {}

    grammar g;
    std::string error;

    uint32_t ws() {
        if (!ws_) {
            ws_ = g.declare("ws");
            const uint32_t indent = repeat("indent", {g.bytes(chars(" \t"))}, 0, o_.max_indent);
            g.add_alternative(*ws_, {});
            add(*ws_, {g.byte(' ')});
            add(*ws_, {g.byte('\n'), g.ref(indent)});
        }
        return *ws_;
    }

    // x{min,max}; max < 0: unbounded.
    uint32_t repeat(const std::string& name, std::vector<element> x, int64_t min, int64_t max) {
        uint32_t tail = 0;
        if (max < 0) {
            tail = g.declare(name + "*");
            g.add_alternative(tail, {});
            std::vector<element> seq = x;
            seq.push_back(g.ref(tail));
            g.add_alternative(tail, seq);
        } else {
            tail = g.declare(name + "{0}");
            g.add_alternative(tail, {});
            for (int64_t k = 1; k <= max - min; ++k) {
                const uint32_t r = g.declare(name + "{" + std::to_string(k) + "}");
                g.add_alternative(r, {});
                std::vector<element> seq = x;
                seq.push_back(g.ref(tail));
                g.add_alternative(r, seq);
                tail = r;
            }
        }
        const uint32_t r = g.declare(name);
        std::vector<element> seq;
        for (int64_t k = 0; k < min; ++k) seq.insert(seq.end(), x.begin(), x.end());
        seq.push_back(g.ref(tail));
        g.add_alternative(r, seq);
        return r;
    }

    uint32_t string_char() {
        if (!char_) {
            const element hex = g.bytes(chars("0123456789abcdefABCDEF"));
            const uint32_t esc = g.declare("escape");
            add(esc, {g.bytes(chars("\"\\/bfnrt"))});
            add(esc, {g.byte('u'), hex, hex, hex, hex});
            char_ = g.declare("char");
            byte_set plain = range(0x20, 0x7F);
            plain.reset('"');
            plain.reset('\\');
            add(*char_, {g.bytes(plain)});
            add(*char_, {g.byte('\\'), g.ref(esc)});
            add(*char_, {g.ref(non_ascii_char())});
        }
        return *char_;
    }

    // One UTF-8 character past U+007F, without overlong forms, surrogates or code points past U+10FFFF (RFC 3629's
    // table).
    uint32_t non_ascii_char() {
        if (!non_ascii_) {
            const element cont = g.bytes(range(0x80, 0xBF));
            non_ascii_ = g.declare("non_ascii");
            add(*non_ascii_, {g.bytes(range(0xC2, 0xDF)), cont});
            add(*non_ascii_, {g.byte(0xE0), g.bytes(range(0xA0, 0xBF)), cont});
            add(*non_ascii_, {g.bytes(range(0xE1, 0xEC)), cont, cont});
            add(*non_ascii_, {g.byte(0xED), g.bytes(range(0x80, 0x9F)), cont});
            add(*non_ascii_, {g.bytes(range(0xEE, 0xEF)), cont, cont});
            add(*non_ascii_, {g.byte(0xF0), g.bytes(range(0x90, 0xBF)), cont, cont});
            add(*non_ascii_, {g.bytes(range(0xF1, 0xF3)), cont, cont, cont});
            add(*non_ascii_, {g.byte(0xF4), g.bytes(range(0x80, 0x8F)), cont, cont});
        }
        return *non_ascii_;
    }

    // A string whose body `pattern` matches in full (regex_grammar.h).
    uint32_t patterned(const json::value& pattern, const std::string& path) {
        if (!pattern.is_string()) return fail(path, "must be a string");
        regex_helpers h;
        h.repeat = [this](const std::string& name, std::vector<element> x, int64_t min, int64_t max) {
            return repeat(name, std::move(x), min, max);
        };
        h.non_ascii_char = non_ascii_char();
        h.max_repetition = o_.max_repetition;
        auto body = regex_string_body(g, pattern.get_string(), h);
        if (!body) return fail(path, body.message());
        const uint32_t r = g.declare("pattern");
        add(r, {g.byte('"'), g.ref(*body), g.byte('"')});
        return r;
    }

    uint32_t string(int64_t min, int64_t max) {
        const auto key = std::make_pair(min, max);
        if (auto it = strings_.find(key); it != strings_.end()) return it->second;
        const uint32_t body = repeat("chars", {g.ref(string_char())}, min, max);
        const uint32_t r = g.declare("string");
        add(r, {g.byte('"'), g.ref(body), g.byte('"')});
        strings_[key] = r;
        return r;
    }

    uint32_t number(bool integer) {
        std::optional<uint32_t>& memo = integer ? integer_ : number_;
        if (memo) return *memo;
        const element digit = g.bytes(range('0', '9'));
        const uint32_t more = repeat("digits", {digit}, 0, o_.max_digits - 1);
        const uint32_t int_part = g.declare("int");
        add(int_part, {g.byte('0')});
        add(int_part, {g.bytes(range('1', '9')), g.ref(more)});
        const uint32_t sign = g.declare("sign");
        g.add_alternative(sign, {});
        add(sign, {g.byte('-')});
        memo = g.declare(integer ? "integer" : "number");
        if (integer) {
            add(*memo, {g.ref(sign), g.ref(int_part)});
            return *memo;
        }
        const uint32_t frac = g.declare("frac");
        g.add_alternative(frac, {});
        add(frac, {g.byte('.'), g.ref(repeat("fdigits", {digit}, 1, o_.max_digits))});
        const uint32_t exp_sign = g.declare("exp_sign");
        g.add_alternative(exp_sign, {});
        add(exp_sign, {g.bytes(chars("+-"))});
        const uint32_t exp = g.declare("exp");
        g.add_alternative(exp, {});
        add(exp, {g.bytes(chars("eE")), g.ref(exp_sign), g.ref(repeat("edigits", {digit}, 1, 3))});
        add(*memo, {g.ref(sign), g.ref(int_part), g.ref(frac), g.ref(exp)});
        return *memo;
    }

    uint32_t any_value() {
        if (any_) return *any_;
        any_ = g.declare("value");
        const uint32_t obj = g.declare("object");
        const uint32_t arr = g.declare("array");
        const uint32_t str = string(0, -1);
        const uint32_t member = g.declare("member");
        add(member, {g.ref(str), g.ref(ws()), g.byte(':'), g.ref(ws()), g.ref(*any_)});
        const uint32_t members = repeat("members", {g.ref(ws()), g.byte(','), g.ref(ws()), g.ref(member)}, 0, -1);
        add(obj, {g.byte('{'), g.ref(ws()), g.byte('}')});
        add(obj, {g.byte('{'), g.ref(ws()), g.ref(member), g.ref(members), g.ref(ws()), g.byte('}')});
        const uint32_t items = repeat("items", {g.ref(ws()), g.byte(','), g.ref(ws()), g.ref(*any_)}, 0, -1);
        add(arr, {g.byte('['), g.ref(ws()), g.byte(']')});
        add(arr, {g.byte('['), g.ref(ws()), g.ref(*any_), g.ref(items), g.ref(ws()), g.byte(']')});
        any_object_ = obj;
        for (uint32_t r : {obj, arr, str, number(false), g.literal("true"), g.literal("false"), g.literal("null")}) {
            add(*any_, {g.ref(r)});
        }
        return *any_;
    }

    uint32_t any_object() {
        any_value();
        return *any_object_;
    }

    uint32_t literal_json(const json::value& v) { return g.literal(json::serialize(v)); }

    // The rule for a schema at `path` (a JSON pointer for messages).
    uint32_t schema(const json::value& s, const std::string& path) {
        if (!error.empty()) return 0;
        if (s.is_bool()) {
            if (!s.get_bool()) return fail(path, "the schema false accepts nothing");
            return any_value();
        }
        if (!s.is_object()) return fail(path, "a schema must be an object or a boolean");
        const json::object& o = s.get_object();
        for (const auto& kv : o) {
            // clang-format off
            static constexpr std::string_view known[] = {
                "type", "properties", "required", "additionalProperties", "items", "prefixItems", "additionalItems",
                "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                "exclusiveMinimum", "exclusiveMaximum", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs",
                "definitions", "title", "description", "default", "examples", "$schema", "$id", "$comment"};
            // clang-format on
            bool ok = false;
            for (auto k : known) ok = ok || kv.key() == k;
            if (!ok) {
                return fail(path,
                            "the keyword '" + std::string(kv.key()) +
                                "' is not supported (supported: type, properties, required, "
                                "additionalProperties, items, prefixItems, minItems, maxItems, minLength, "
                                "maxLength, pattern, format, minimum, maximum, exclusiveMinimum, exclusiveMaximum, "
                                "enum, const, anyOf, oneOf, allOf, $ref, $defs)");
            }
        }
        if (const json::value* ref = o.if_contains("$ref")) return reference(*ref, path + "/$ref");
        if (const json::value* c = o.if_contains("const")) return literal_json(*c);
        if (const json::value* e = o.if_contains("enum")) {
            if (!e->is_array() || e->get_array().empty()) return fail(path + "/enum", "must be a non-empty array");
            const uint32_t r = g.declare("enum");
            for (const auto& v : e->get_array()) add(r, {g.ref(literal_json(v))});
            return r;
        }
        for (const char* key : {"anyOf", "oneOf", "allOf"}) {
            const json::value* a = o.if_contains(key);
            if (!a) continue;
            const std::string where = path + "/" + key;
            if (!a->is_array() || a->get_array().empty()) return fail(where, "must be a non-empty array of schemas");
            if (std::string_view(key) == "allOf") {
                json::array parts = a->get_array();
                json::object rest = o;  // keywords beside allOf apply too
                rest.erase("allOf");
                if (!rest.empty()) parts.push_back(std::move(rest));
                if (parts.size() > 1) {
                    auto merged = merge_all_of(root_, parts, where);
                    if (auto* e = std::get_if<schema_error>(&merged)) return fail(e->path, e->message);
                    merged_.push_back(std::move(std::get<json::value>(merged)));
                    return schema(merged_.back(), where);
                }
            }
            const uint32_t r = g.declare(key);
            for (size_t i = 0; i < a->get_array().size(); ++i) {
                add(r, {g.ref(schema(a->get_array()[i], where + "/" + std::to_string(i)))});
            }
            return r;
        }
        const json::value* type = o.if_contains("type");
        if (!type) {
            if (o.contains("properties")) return typed(o, "object", path);
            if (o.contains("items") || o.contains("prefixItems")) return typed(o, "array", path);
            // A string's or a number's keywords without a type: values of that type (a subset of what the schema
            // allows, which takes any value of another type, but the one its keywords constrain).
            for (const char* key : {"format", "pattern", "minLength", "maxLength"}) {
                if (o.contains(key)) return typed(o, "string", path);
            }
            for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
                if (o.contains(key)) return typed(o, "number", path);
            }
            return any_value();
        }
        if (type->is_string()) return typed(o, type->get_string(), path);
        if (!type->is_array() || type->get_array().empty()) {
            return fail(path + "/type", "must be a type name or a non-empty array of type names");
        }
        const uint32_t r = g.declare("types");
        for (const auto& t : type->get_array()) {
            if (!t.is_string()) return fail(path + "/type", "must hold type names (strings)");
            add(r, {g.ref(typed(o, t.get_string(), path))});
        }
        return r;
    }

    std::optional<grammar> finish(uint32_t value) {
        if (!error.empty()) return std::nullopt;
        const uint32_t root = g.declare("root");
        add(root, {g.ref(ws()), g.ref(value)});
        g.set_root(root);
        return std::move(g);
    }

private:
    void add(uint32_t rule, std::initializer_list<element> seq) {
        g.add_alternative(rule, std::span<const element>(seq.begin(), seq.size()));
    }
    void add(uint32_t rule, const std::vector<element>& seq) { g.add_alternative(rule, seq); }

    uint32_t fail(const std::string& path, const std::string& message) {
        if (error.empty()) error = "json_schema at " + (path.empty() ? std::string("#") : path) + ": " + message;
        return 0;
    }

    std::optional<int64_t> bound(const json::object& o, const char* key, const std::string& path) {
        const json::value* v = o.if_contains(key);
        if (!v) return std::nullopt;
        int64_t x = -1;
        if (v->is_int64()) x = v->get_int64();
        if (v->is_uint64() && v->get_uint64() < (1u << 31)) x = static_cast<int64_t>(v->get_uint64());
        if (x < 0 || x > o_.max_repetition) {
            fail(path + "/" + key, "must be an integer between 0 and " + std::to_string(o_.max_repetition));
            return std::nullopt;
        }
        return x;
    }

    uint32_t typed(const json::object& o, std::string_view type, const std::string& path) {
        if (type == "string") {
            const int64_t min = bound(o, "minLength", path).value_or(0);
            const auto max = bound(o, "maxLength", path);
            if (max && *max < min) return fail(path, "maxLength is below minLength");
            if (const json::value* p = o.if_contains("pattern")) {
                if (o.contains("minLength") || max || o.contains("format")) {
                    return fail(path, "pattern with minLength / maxLength / format is not supported");
                }
                return patterned(*p, path + "/pattern");
            }
            if (const json::value* f = o.if_contains("format")) {
                if (o.contains("minLength") || max)
                    return fail(path, "format with minLength / maxLength is not supported");
                return formatted(*f, path + "/format");
            }
            return string(min, max.value_or(-1));
        }
        if (type == "number" || type == "integer") {
            const bool integer = type == "integer";
            for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
                if (o.contains(key)) return bounded_number(o, integer, path);
            }
            return number(integer);
        }
        if (type == "boolean") {
            const uint32_t r = g.declare("boolean");
            add(r, {g.ref(g.literal("true"))});
            add(r, {g.ref(g.literal("false"))});
            return r;
        }
        if (type == "null") return g.literal("null");
        if (type == "array") return array(o, path);
        if (type == "object") return object(o, path);
        return fail(path + "/type", "unknown type '" + std::string(type) +
                                        "' (valid: string, number, integer, boolean, null, object, array)");
    }

    uint32_t array(const json::object& o, const std::string& path) {
        const int64_t min = bound(o, "minItems", path).value_or(0);
        const auto max = bound(o, "maxItems", path);
        if (max && *max < min) return fail(path, "maxItems is below minItems");
        if (o.contains("prefixItems")) return tuple(o, "prefixItems", "items", path);
        if (const json::value* items = o.if_contains("items"); items && items->is_array()) {
            return tuple(o, "items", "additionalItems", path);  // drafts 4-7 write tuples as an items array
        }
        const json::value* items = o.if_contains("items");
        const uint32_t item = items ? schema(*items, path + "/items") : any_value();
        const uint32_t r = g.declare("array");
        if (min == 0) add(r, {g.byte('['), g.ref(ws()), g.byte(']')});
        if (max && *max == 0) return r;
        const uint32_t more = repeat("items", {g.ref(ws()), g.byte(','), g.ref(ws()), g.ref(item)},
                                     std::max<int64_t>(min - 1, 0), max ? *max - 1 : -1);
        add(r, {g.byte('['), g.ref(ws()), g.ref(item), g.ref(more), g.ref(ws()), g.byte(']')});
        return r;
    }

    uint32_t object(const json::object& o, const std::string& path) {
        const json::value* props = o.if_contains("properties");
        const json::value* extra = o.if_contains("additionalProperties");
        if (!props || (props->is_object() && props->get_object().empty())) {
            if (extra && extra->is_bool() && !extra->get_bool()) {
                const uint32_t r = g.declare("empty_object");
                add(r, {g.byte('{'), g.ref(ws()), g.byte('}')});
                return r;
            }
            if (extra && !extra->is_bool()) return keyed(props, extra, o, path);
            return any_object();
        }
        if (!props->is_object()) return fail(path + "/properties", "must be an object of schemas");
        return keyed(props, extra, o, path);
    }

    // An object with the named properties in order, then (when allowed) other members.
    uint32_t keyed(const json::value* props, const json::value* extra, const json::object& o, const std::string& path) {
        std::vector<std::string> required;
        if (const json::value* req = o.if_contains("required")) {
            if (!req->is_array()) return fail(path + "/required", "must be an array of property names");
            for (const auto& n : req->get_array()) {
                if (!n.is_string()) return fail(path + "/required", "must be an array of property names");
                if (!props || !props->get_object().contains(n.get_string())) {
                    return fail(path + "/required",
                                "names '" + std::string(n.get_string()) + "', which is not among the properties");
                }
                required.emplace_back(n.get_string());
            }
        }
        struct prop {
            uint32_t member = 0;
            bool required = false;
        };
        std::vector<prop> ps;
        if (props) {
            for (const auto& kv : props->get_object()) {
                const uint32_t value = schema(kv.value(), path + "/properties/" + std::string(kv.key()));
                const uint32_t m = g.declare("member");
                add(m,
                    {g.ref(literal_json(json::string(kv.key()))), g.ref(ws()), g.byte(':'), g.ref(ws()), g.ref(value)});
                bool req = false;
                for (const auto& r : required) req = req || r == kv.key();
                ps.push_back({m, req});
            }
        }
        std::optional<uint32_t> extra_member;
        if (extra && !(extra->is_bool() && !extra->get_bool())) {
            const uint32_t value = schema(*extra, path + "/additionalProperties");
            extra_member = g.declare("extra_member");
            add(*extra_member, {g.ref(string(0, -1)), g.ref(ws()), g.byte(':'), g.ref(ws()), g.ref(value)});
        }
        // P[i][after], built from the end.
        const size_t k = ps.size();
        std::vector<std::array<uint32_t, 2>> rest(k + 1);
        for (int after = 0; after < 2; ++after) {
            const uint32_t r = g.declare("rest");
            g.add_alternative(r, {});
            if (extra_member) {
                std::vector<element> seq;
                if (after) seq = {g.byte(','), g.ref(ws())};
                seq.push_back(g.ref(*extra_member));
                seq.push_back(g.ref(ws()));
                seq.push_back(
                    g.ref(repeat("extra", {g.byte(','), g.ref(ws()), g.ref(*extra_member), g.ref(ws())}, 0, -1)));
                add(r, seq);
            }
            rest[k][static_cast<size_t>(after)] = r;
        }
        for (size_t i = k; i-- > 0;) {
            for (int after = 0; after < 2; ++after) {
                const uint32_t r = g.declare("members");
                std::vector<element> seq;
                if (after) seq = {g.byte(','), g.ref(ws())};
                seq.push_back(g.ref(ps[i].member));
                seq.push_back(g.ref(ws()));
                seq.push_back(g.ref(rest[i + 1][1]));
                add(r, seq);
                if (!ps[i].required) add(r, {g.ref(rest[i + 1][static_cast<size_t>(after)])});
                rest[i][static_cast<size_t>(after)] = r;
            }
        }
        const uint32_t r = g.declare("object");
        add(r, {g.byte('{'), g.ref(ws()), g.ref(rest[0][0]), g.byte('}')});
        return r;
    }

    // A tuple: the listed item schemas in order, every one present (a subset of what the schema allows when it
    // lets a tuple end early), then items of the `rest` schema where it is one (false or absent: no more).
    uint32_t tuple(const json::object& o, const char* listed, const char* rest_key, const std::string& path) {
        const json::value* list = o.if_contains(listed);
        const std::string where = path + "/" + listed;
        if (!list->is_array() || list->get_array().empty()) return fail(where, "must be a non-empty array of schemas");
        const auto& schemas = list->get_array();
        const int64_t n = static_cast<int64_t>(schemas.size());
        if (const auto max = bound(o, "maxItems", path); max && *max < n) {
            return fail(path, "maxItems is below the number of " + std::string(listed) + " (" + std::to_string(n) +
                                  "), which are all written");
        }
        std::vector<element> seq = {g.byte('['), g.ref(ws())};
        for (int64_t i = 0; i < n; ++i) {
            if (i > 0) seq.insert(seq.end(), {g.ref(ws()), g.byte(','), g.ref(ws())});
            seq.push_back(g.ref(schema(schemas[static_cast<size_t>(i)], where + "/" + std::to_string(i))));
        }
        const json::value* rest = o.if_contains(rest_key);
        if (rest && !(rest->is_bool() && !rest->get_bool())) {
            const uint32_t item = schema(*rest, path + "/" + rest_key);
            const auto max = bound(o, "maxItems", path);
            seq.push_back(
                g.ref(repeat("items", {g.ref(ws()), g.byte(','), g.ref(ws()), g.ref(item)},
                             std::max<int64_t>(bound(o, "minItems", path).value_or(0) - n, 0), max ? *max - n : -1)));
        }
        seq.insert(seq.end(), {g.ref(ws()), g.byte(']')});
        const uint32_t r = g.declare("tuple");
        add(r, seq);
        return r;
    }

    // A string of a format: date (YYYY-MM-DD), time (hh:mm:ss[.fff] with Z or an offset), date-time (date T time)
    // and uuid (8-4-4-4-12 hex digits), quoted.
    uint32_t formatted(const json::value& f, const std::string& path) {
        const std::string_view name = f.is_string() ? std::string_view(f.get_string()) : std::string_view();
        // Formats written as patterns: each accepts a common subset of the valid texts (plain ASCII addresses,
        // http(s) URIs), never an invalid one.
        static constexpr std::pair<std::string_view, std::string_view> k_patterns[] = {
            {"email", R"([A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24})"},
            {"hostname",
             R"(([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){0,8}[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)"},
            {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
            {"uri",
             R"(https?://[A-Za-z0-9.-]{1,253}(:\d{1,5})?(/[A-Za-z0-9._~%!$&'()*+,;=:@-]*){0,16}(\?[A-Za-z0-9._~%!$&'()*+,;=:@/?-]*)?)"},
        };
        for (const auto& [format, pattern] : k_patterns) {
            if (name == format) return patterned(json::string(pattern), path);
        }
        if (name != "date" && name != "time" && name != "date-time" && name != "uuid") {
            return fail(path, "the format '" + std::string(name) +
                                  "' is not supported (supported: date, time, date-time, uuid, email, hostname, "
                                  "ipv4, uri)");
        }
        const element digit = g.bytes(range('0', '9'));
        const auto two_digits = [&](const char* name, char first_max, char last_max_with_max_first) {
            // 00 .. first_max last_max: [0-(first_max-1)][0-9] | first_max [0-last_max]
            const uint32_t r = g.declare(name);
            add(r, {g.bytes(range('0', static_cast<unsigned>(first_max - 1))), digit});
            add(r, {g.byte(static_cast<unsigned char>(first_max)),
                    g.bytes(range('0', static_cast<unsigned>(last_max_with_max_first)))});
            return r;
        };
        std::vector<element> body;
        const auto date = [&]() {
            const uint32_t month = g.declare("month");
            add(month, {g.byte('0'), g.bytes(range('1', '9'))});
            add(month, {g.byte('1'), g.bytes(range('0', '2'))});
            const uint32_t day = g.declare("day");
            add(day, {g.byte('0'), g.bytes(range('1', '9'))});
            add(day, {g.bytes(range('1', '2')), digit});
            add(day, {g.byte('3'), g.bytes(range('0', '1'))});
            body.insert(body.end(), {digit, digit, digit, digit, g.byte('-'), g.ref(month), g.byte('-'), g.ref(day)});
        };
        const auto time = [&]() {
            const uint32_t hour = two_digits("hour", '2', '3');
            const element sixty = g.bytes(range('0', '5'));
            const uint32_t frac = g.declare("fraction");
            g.add_alternative(frac, {});
            add(frac, {g.byte('.'), g.ref(repeat("fdigits", {digit}, 1, 9))});
            const uint32_t zone = g.declare("zone");
            add(zone, {g.byte('Z')});
            add(zone, {g.bytes(chars("+-")), g.ref(hour), g.byte(':'), sixty, digit});
            body.insert(body.end(),
                        {g.ref(hour), g.byte(':'), sixty, digit, g.byte(':'), sixty, digit, g.ref(frac), g.ref(zone)});
        };
        if (name == "date" || name == "date-time") date();
        if (name == "date-time") body.push_back(g.byte('T'));
        if (name == "time" || name == "date-time") time();
        if (name == "uuid") {
            const element hex = g.bytes(chars("0123456789abcdefABCDEF"));
            for (int group : {8, 4, 4, 4, 12}) {
                if (!body.empty()) body.push_back(g.byte('-'));
                body.insert(body.end(), static_cast<size_t>(group), hex);
            }
        }
        const uint32_t r = g.declare(std::string(name));
        body.insert(body.begin(), g.byte('"'));
        body.push_back(g.byte('"'));
        add(r, body);
        return r;
    }

    // A bound of a number schema: minimum / maximum, and exclusiveMinimum / exclusiveMaximum as numbers (draft 6
    // on) or as booleans that make minimum / maximum exclusive (draft 4). Empty where absent; false (with the
    // error set) where malformed.
    struct number_bound {
        std::optional<double> value;
        bool exclusive = false;
    };
    bool read_bound(const json::object& o, const char* key, const char* exclusive_key, number_bound& b,
                    const std::string& path) {
        const auto as_number = [&](const json::value& v, const std::string& where) -> std::optional<double> {
            if (v.is_int64()) return static_cast<double>(v.get_int64());
            if (v.is_uint64()) return static_cast<double>(v.get_uint64());
            if (v.is_double()) return v.get_double();
            fail(where, "must be a number");
            return std::nullopt;
        };
        if (const json::value* v = o.if_contains(key)) {
            b.value = as_number(*v, path + "/" + key);
            if (!b.value) return false;
        }
        if (const json::value* x = o.if_contains(exclusive_key)) {
            if (x->is_bool()) {
                b.exclusive = x->get_bool() && b.value;
                return true;
            }
            const auto v = as_number(*x, path + "/" + exclusive_key);
            if (!v) return false;
            // The tighter of the two, when both are given.
            if (!b.value || (std::string_view(key) == "minimum" ? *v >= *b.value : *v <= *b.value)) {
                b.value = v;
                b.exclusive = true;
            }
        }
        if (b.value && std::fabs(*b.value) > 1e15) {
            fail(path + "/" + key, "bounds beyond 1e15 in magnitude are not supported");
            return false;
        }
        return true;
    }

    // Numbers within the schema's bounds. Integers: exactly the integers in range, no exponent. Numbers: those
    // integers, and decimals I.F whose every value lies inside (for I >= 0: I in range and I + 1 at most the
    // maximum; for I < 0: I - 1 at least the minimum; -0.F where the range holds (-1, 0]), no exponent: a subset
    // of the numbers in range (fractional bounds cut off the decimals of their first or last unit), never a number
    // outside it.
    uint32_t bounded_number(const json::object& o, bool integer, const std::string& path) {
        number_bound lo, hi;
        if (!read_bound(o, "minimum", "exclusiveMinimum", lo, path) ||
            !read_bound(o, "maximum", "exclusiveMaximum", hi, path)) {
            return 0;
        }
        std::optional<int64_t> lo_int, hi_int;  // the integers in range
        if (lo.value) lo_int = static_cast<int64_t>(lo.exclusive ? std::floor(*lo.value) + 1 : std::ceil(*lo.value));
        if (hi.value) hi_int = static_cast<int64_t>(hi.exclusive ? std::ceil(*hi.value) - 1 : std::floor(*hi.value));
        const uint32_t r = g.declare(integer ? "integer_range" : "number_range");
        size_t n_alternatives = add_integer_range(g, r, lo_int, hi_int, {}, o_.max_digits);
        if (!integer) {
            const element digit = g.bytes(range('0', '9'));
            const uint32_t frac = repeat("fdigits", {digit}, 1, o_.max_digits);
            const std::vector<element> tail = {g.byte('.'), g.ref(frac)};
            // A fraction that is not zero: zeros, a digit 1-9, any digits.
            const uint32_t nonzero = g.declare("nonzero_fdigits");
            add(nonzero, {g.ref(repeat("fzeros", {g.byte('0')}, 0, o_.max_digits - 1)), g.bytes(range('1', '9')),
                          g.ref(repeat("fdigits", {digit}, 0, o_.max_digits - 1))});
            const std::vector<element> nonzero_tail = {g.byte('.'), g.ref(nonzero)};
            const auto is_int = [](double x) { return x == std::floor(x); };
            // I >= 0: [I, I + 1) inside when I >= lo_int and I + 1 <= max; past an exclusive integer minimum L,
            // L.F with F not zero.
            std::optional<int64_t> pos_hi;
            if (hi.value) pos_hi = static_cast<int64_t>(std::floor(*hi.value)) - 1;
            n_alternatives +=
                add_integer_range(g, r, std::max<int64_t>(lo_int.value_or(0), 0), pos_hi, tail, o_.max_digits);
            if (lo.exclusive && is_int(*lo.value) && *lo.value >= 0 && (!hi.value || *lo.value + 1 <= *hi.value)) {
                const auto l = static_cast<int64_t>(*lo.value);
                n_alternatives += add_integer_range(g, r, l, l, nonzero_tail, o_.max_digits);
            }
            // I <= -1: (I - 1, I] inside when I - 1 >= min and I <= hi_int; below an exclusive integer maximum
            // U <= -1, U.F with F not zero.
            std::optional<int64_t> neg_lo;
            if (lo.value) neg_lo = static_cast<int64_t>(std::ceil(*lo.value)) + 1;
            const int64_t neg_hi = std::min<int64_t>(hi_int.value_or(-1), -1);
            n_alternatives += add_integer_range(g, r, neg_lo, neg_hi, tail, o_.max_digits);
            if (hi.exclusive && is_int(*hi.value) && *hi.value <= -1 && (!lo.value || *hi.value - 1 >= *lo.value)) {
                const auto u = static_cast<int64_t>(*hi.value);
                n_alternatives += add_integer_range(g, r, u, u, nonzero_tail, o_.max_digits);
            }
            // -0.F: (-1, 0] inside when min <= -1 and max >= 0 (F not zero where 0 itself is excluded).
            if ((!lo.value || *lo.value <= -1) && (!hi.value || *hi.value >= 0)) {
                const bool zero_out = hi.value && *hi.value == 0 && hi.exclusive;
                std::vector<element> seq = {g.byte('-'), g.byte('0')};
                const auto& t = zero_out ? nonzero_tail : tail;
                seq.insert(seq.end(), t.begin(), t.end());
                add(r, seq);
            }
        }
        if (n_alternatives == 0) return fail(path, "no number lies between its minimum and maximum");
        return r;
    }

    uint32_t reference(const json::value& ref, const std::string& path) {
        if (!ref.is_string()) return fail(path, "must be a string");
        const std::string target(ref.get_string());
        if (auto it = refs_.find(target); it != refs_.end()) return it->second;
        auto def = schema_definition(root_, target);
        if (auto* e = std::get_if<std::string>(&def)) return fail(path, *e);
        const json::value* found = std::get<const json::value*>(def);
        const uint32_t r = g.declare("ref");
        refs_[target] = r;  // before the body: the definition may refer to itself
        add(r, {g.ref(schema(*found, target))});
        return r;
    }

    const json::value* root_;
    json_grammar_options o_;
    std::optional<uint32_t> ws_, char_, non_ascii_, number_, integer_, any_, any_object_;
    std::deque<json::value> merged_;  // allOf parts merged into one schema (stable addresses)
    std::map<std::pair<int64_t, int64_t>, uint32_t> strings_;
    std::map<std::string, uint32_t> refs_;
};

}  // namespace

result<grammar> json_schema_grammar(const json::value& schema, const json_grammar_options& options) {
    builder b(&schema, options);
    const uint32_t value = b.schema(schema, "#");
    auto g = b.finish(value);
    if (!g) return make_error(b.error);
    if (std::string e = g->check(); !e.empty()) return make_error("json_schema: " + e);
    return std::move(*g);
}

grammar json_object_grammar(const json_grammar_options& options) {
    builder b(nullptr, options);
    const uint32_t obj = b.any_object();
    return std::move(*b.finish(obj));
}

}  // namespace troupe::grammar
