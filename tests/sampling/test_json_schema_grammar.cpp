// JSON schema grammars: tables of texts each must accept or refuse, the token masks over a small
// vocabulary, and sampling under a constraint from random logits, whose every output must parse as JSON
// and match the schema.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "core/sampling/grammar/json_schema_grammar.h"
#include "core/sampling/grammar/token_constraint.h"
#include "core/sampling/sampler.h"

namespace troupe::grammar {
namespace {
namespace json = boost::json;

bool accepts(const grammar& g, std::string_view text) {
    matcher m(g);
    grammar_state s = m.start();
    return m.advance(s, text) && matcher::complete(s);
}

grammar schema_grammar(std::string_view schema) {
    auto g = json_schema_grammar(json::parse(schema));
    EXPECT_TRUE(g.ok()) << g.message();
    return std::move(g.value());
}

constexpr std::string_view person_schema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 8},
    "age": {"type": "integer"},
    "mood": {"enum": ["happy", "sad"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
    "score": {"type": ["number", "null"]},
    "pet": {"type": "boolean"}
  },
  "required": ["name", "age", "mood", "tags"],
  "additionalProperties": false
})";

TEST(json_schema_grammar, any_json_object_accepts_json_objects_and_refuses_everything_else) {
    const grammar g = json_object_grammar();
    for (std::string_view ok : {R"({})", R"( {"a": 1})", R"({"a":[1,2.5e-3,{"b":null}],"c":"x\n\u00e9 \u2603"})",
                                "{\n  \"k\": true,\n  \"l\": false\n}", "{\"\xc3\xa9\": -0}"}) {
        EXPECT_TRUE(accepts(g, ok)) << ok;
    }
    for (std::string_view bad : {"[1]", R"({"a":})", R"({"a":1,})", R"({"a" 1})", R"({} x)", R"({"a":01})",
                                 R"({"a":"\x"})", "{\"a\":\"\x01\"}", "{\"a\":\"\xc3\"}", "{\"a\":\"\xed\xa0\x80\"}",
                                 "{\"a\":\"\xe0\x80\x80\"}", R"({"a":1}})", "{          \"a\":1}", R"({"a":.5})"}) {
        EXPECT_FALSE(accepts(g, bad)) << bad;
    }
}

TEST(json_schema_grammar, a_schema_with_required_optional_enum_and_array_fields_accepts_exactly_its_objects) {
    const grammar g = schema_grammar(person_schema);
    for (std::string_view ok : {
             R"({"name": "Tom", "age": 3, "mood": "sad", "tags": []})",
             R"({"name":"","age":-12,"mood":"happy","tags":["a","bcde"],"score":1.5,"pet":true})",
             R"({"name": "Lily", "age": 0, "mood": "happy", "tags": ["x"], "score": null})",
             R"({"name": "Lily", "age": 0, "mood": "happy", "tags": ["x"], "pet": false})",
         }) {
        EXPECT_TRUE(accepts(g, ok)) << ok;
    }
    for (std::string_view bad : {
             R"({"name": "Tom", "age": 3, "mood": "sad"})",                           // tags required
             R"({"age": 3, "name": "Tom", "mood": "sad", "tags": []})",               // order
             R"({"name": "Tom", "age": 3.5, "mood": "sad", "tags": []})",             // integer
             R"({"name": "Tom", "age": 3, "mood": "angry", "tags": []})",             // enum
             R"({"name": "Tom", "age": 3, "mood": "sad", "tags": ["a", "b", "c"]})",  // maxItems
             R"({"name": "Tommy Lee", "age": 3, "mood": "sad", "tags": []})",         // maxLength
             R"({"name": "Tom", "age": 3, "mood": "sad", "tags": [], "x": 1})",       // additional
             R"({"name": "Tom", "age": 3, "mood": "sad", "tags": [], "pet": 1})",     // boolean
         }) {
        EXPECT_FALSE(accepts(g, bad)) << bad;
    }
}

TEST(json_schema_grammar, any_of_const_refs_and_additional_properties_follow_the_schema) {
    struct row {
        std::string_view schema;
        std::vector<std::string_view> ok, bad;
    };
    const std::vector<row> rows = {
        {R"({"anyOf": [{"type": "integer"}, {"const": "none"}]})", {"7", R"("none")"}, {R"("some")", "7.5"}},
        {R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
             "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"]}},
             "$ref": "#/$defs/node"})",
         {R"({"v": 1, "next": {"v": 2, "next": null}})"},
         {R"({"v": 1, "next": {"v": 2}})"}},
        {R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}})",
         {R"({"a": 1, "b": "x", "c": "y"})", R"({"b": "x"})", "{}"},
         {R"({"a": 1, "b": 2})"}},
        {R"({"type": "array", "items": {"type": "boolean"}, "minItems": 2})",
         {"[true, false]", "[true,true,true]"},
         {"[]", "[true]"}},
        {R"({"type": "string", "minLength": 2, "maxLength": 3})",
         {R"("ab")", "\"\xc3\xa9\xc3\xa9\xc3\xa9\""},
         {R"("a")", R"("abcd")"}},
    };
    for (const auto& r : rows) {
        const grammar g = schema_grammar(r.schema);
        for (auto ok : r.ok) EXPECT_TRUE(accepts(g, ok)) << r.schema << "\n" << ok;
        for (auto bad : r.bad) EXPECT_FALSE(accepts(g, bad)) << r.schema << "\n" << bad;
    }
}

// Integer bounds give exactly the integers in range (checked against every integer from -1200 to 1200 for random
// bounds, one-sided ones included) in JSON's form only (no "-0", leading zeros or '+').
TEST(json_schema_grammar, integer_bounds_accept_exactly_the_integers_in_range) {
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> pick(-1000, 1000);
    for (int round = 0; round < 40; ++round) {
        int lo = pick(rng), hi = pick(rng);
        if (lo > hi) std::swap(lo, hi);
        const int kind = round % 4;  // both bounds, minimum only, maximum only, exclusive both
        std::string schema = R"({"type": "integer")";
        if (kind == 0 || kind == 1) schema += ", \"minimum\": " + std::to_string(lo);
        if (kind == 0 || kind == 2) schema += ", \"maximum\": " + std::to_string(hi);
        if (kind == 3) {
            schema += ", \"exclusiveMinimum\": " + std::to_string(lo) + ", \"exclusiveMaximum\": " + std::to_string(hi);
        }
        schema += "}";
        auto g = json_schema_grammar(json::parse(schema));
        if (kind == 3 && hi - lo < 2) {
            EXPECT_FALSE(g.ok()) << schema;
            continue;
        }
        ASSERT_TRUE(g.ok()) << schema << ": " << g.message();
        for (int v = -1200; v <= 1200; ++v) {
            const bool in = kind == 3 ? (v > lo && v < hi) : ((kind == 2 || v >= lo) && (kind == 1 || v <= hi));
            ASSERT_EQ(accepts(*g, std::to_string(v)), in) << schema << " on " << v;
        }
        for (const char* odd : {"-0", "00", "01", "+1", "1.0", "1e2"}) EXPECT_FALSE(accepts(*g, odd)) << odd;
    }
    const grammar big = schema_grammar(R"({"type": "integer", "minimum": 999999999, "maximum": 1000000001})");
    EXPECT_TRUE(accepts(big, "999999999"));
    EXPECT_TRUE(accepts(big, "1000000001"));
    EXPECT_FALSE(accepts(big, "1000000002"));
    EXPECT_FALSE(accepts(big, "99999999"));
}

// Number bounds: every accepted text is a number in range (a subset: decimals of a bound's fractional unit are
// left out), the integers in range are all accepted, and so are decimals well inside it.
TEST(json_schema_grammar, number_bounds_accept_only_numbers_in_range) {
    const struct {
        const char* schema;
        double lo, hi;
        bool lo_open, hi_open;
        std::vector<const char*> inside;
    } rows[] = {
        {R"({"type": "number", "minimum": 0, "maximum": 1})", 0, 1, false, false, {"0", "0.5", "0.999", "1"}},
        {R"({"type": "number", "minimum": -2.5, "maximum": 3})", -2.5, 3, false, false, {"-2", "-1.75", "-0.5", "2.9"}},
        {R"({"type": "number", "exclusiveMinimum": 0})", 0, 1e300, true, false, {"1", "0.25", "12345.5"}},
        {R"({"type": "number", "maximum": -1, "exclusiveMaximum": -3})",
         -1e300,
         -3,
         false,
         true,
         {"-4", "-17.5", "-3.5"}},
        {R"({"type": "number", "exclusiveMinimum": -5, "exclusiveMaximum": 0})", -5, 0, true, true, {"-4.5", "-0.5"}},
    };
    for (const auto& row : rows) {
        const grammar g = schema_grammar(row.schema);
        for (const char* text : row.inside) EXPECT_TRUE(accepts(g, text)) << row.schema << " on " << text;
        // Texts at and beside the bounds: zero fractions of an excluded bound, -0.0 below an excluded 0.
        for (const char* text : {"0", "0.0", "-0.0", "-0.000", "1.0", "-3.0", "-3.00", "-5.0", "-1.5", "0.5"}) {
            if (!accepts(g, text)) continue;
            const double x = std::strtod(text, nullptr);
            EXPECT_TRUE(row.lo_open ? x > row.lo : x >= row.lo) << row.schema << " accepted " << text;
            EXPECT_TRUE(row.hi_open ? x < row.hi : x <= row.hi) << row.schema << " accepted " << text;
        }
        std::mt19937 rng(9);
        std::uniform_real_distribution<double> any(-30, 30);
        for (int i = 0; i < 3000; ++i) {
            char text[32];
            const double v = any(rng);
            std::snprintf(text, sizeof text, i % 3 == 0 ? "%.0f" : (i % 3 == 1 ? "%.1f" : "%.3f"), v);
            if (!accepts(g, text)) continue;
            const double x = std::strtod(text, nullptr);
            EXPECT_TRUE(row.lo_open ? x > row.lo : x >= row.lo) << row.schema << " accepted " << text;
            EXPECT_TRUE(row.hi_open ? x < row.hi : x <= row.hi) << row.schema << " accepted " << text;
        }
    }
}

TEST(json_schema_grammar, date_time_and_uuid_formats_and_tuples) {
    const grammar date = schema_grammar(R"({"type": "string", "format": "date"})");
    EXPECT_TRUE(accepts(date, R"("2026-12-02")"));
    for (const char* bad : {R"("2026-13-02")", R"("2026-00-10")", R"("2026-12-32")", R"("26-12-02")", "20261202"})
        EXPECT_FALSE(accepts(date, bad)) << bad;
    const grammar time = schema_grammar(R"({"type": "string", "format": "time"})");
    for (const char* good : {R"("23:59:59Z")", R"("07:05:00.123+01:00")", R"("00:00:00-11:30")"})
        EXPECT_TRUE(accepts(time, good)) << good;
    for (const char* bad : {R"("24:00:00Z")", R"("12:60:00Z")", R"("12:00:00")"})
        EXPECT_FALSE(accepts(time, bad)) << bad;
    const grammar stamp = schema_grammar(R"({"type": "string", "format": "date-time"})");
    EXPECT_TRUE(accepts(stamp, R"("2026-12-02T07:16:16Z")"));
    EXPECT_FALSE(accepts(stamp, R"("2026-12-02 07:16:16Z")"));
    const struct {
        const char* format;
        std::vector<const char*> good, bad;
    } patterned_formats[] = {
        {"email", {R"("ann.lee+x@mail.example.com")", R"("a@b.io")"}, {R"("ann@")", R"("@b.io")", R"("a b@c.io")"}},
        {"hostname", {R"("example.com")", R"("a-1.b.c")", R"("localhost")"}, {R"("-a.com")", R"("a..b")", R"("a_b")"}},
        {"ipv4", {R"("192.168.0.255")", R"("8.8.8.8")"}, {R"("256.1.1.1")", R"("1.2.3")", R"("01.2.3.4")"}},
        {"uri", {R"("https://example.com/a/b?x=1&y=2")", R"("http://h:8080")"}, {R"("example.com")", R"("ftp://h")"}},
    };
    for (const auto& row : patterned_formats) {
        const grammar g = schema_grammar(R"({"type": "string", "format": ")" + std::string(row.format) + "\"}");
        for (const char* text : row.good) EXPECT_TRUE(accepts(g, text)) << row.format << " " << text;
        for (const char* text : row.bad) EXPECT_FALSE(accepts(g, text)) << row.format << " " << text;
    }
    const grammar uuid = schema_grammar(R"({"type": "string", "format": "uuid"})");
    EXPECT_TRUE(accepts(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
    EXPECT_FALSE(accepts(uuid, R"("123e4567-e89b-12d3-a456-42661417400")"));

    const grammar pair =
        schema_grammar(R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]})");
    EXPECT_TRUE(accepts(pair, R"([1, "a"])"));
    EXPECT_FALSE(accepts(pair, R"(["a", 1])"));
    EXPECT_FALSE(accepts(pair, R"([1, "a", 2])"));
    const grammar more = schema_grammar(
        R"({"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "null"}, "maxItems": 3})");
    EXPECT_TRUE(accepts(more, "[true]"));
    EXPECT_TRUE(accepts(more, "[true, null, null]"));
    EXPECT_FALSE(accepts(more, "[true, null, null, null]"));
    const grammar old_style = schema_grammar(R"({"items": [{"format": "date"}, {"const": 1}]})");
    EXPECT_TRUE(accepts(old_style, R"(["2026-01-31", 1])"));
    EXPECT_FALSE(accepts(old_style, R"(["yesterday", 1])"));  // no type: format still makes it a date string
    const grammar untyped = schema_grammar(R"({"minimum": 1, "maximum": 2})");
    EXPECT_TRUE(accepts(untyped, "1.5"));
    EXPECT_FALSE(accepts(untyped, "3"));
}

// A pattern's grammar accepts a string exactly when std::regex (ECMAScript) matches it in full: random strings
// over each pattern's alphabet, JSON-encoded (quotes and backslashes escaped, control characters as \n, \u0001).
TEST(json_schema_grammar, a_pattern_accepts_exactly_the_strings_it_matches_in_full) {
    const auto encode = [](const std::string& text) {
        std::string out = "\"";
        for (unsigned char c : text) {
            if (c == '"' || c == '\\') {
                out += '\\';
                out += static_cast<char>(c);
            } else if (c == '\n') {
                out += "\\n";
            } else if (c == '\t') {
                out += "\\t";
            } else if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
        }
        return out + "\"";
    };
    const struct {
        const char* pattern;
        const char* alphabet;
        const char* example;  // a string it matches
    } rows[] = {
        {R"(^\d{3}-\d{4}$)", "0123-9a", "555-0123"},
        {R"([A-Z][a-z]+( [A-Z][a-z]+)?)", "Aab Zz-", "Ab Zab"},
        {R"((ab|c)*d?)", "abcdx", "abcabd"},
        {R"(x{2,4}y{0,}z+)", "xyzw", "xxxyyz"},
        {R"([^a-c\s]\w*)", "abcdX_9 \t\n-", "-a_9"},
        {R"(\.\*\[\]\\"q")", ".*[]\\\"q", ".*[]\\\"q\""},
        {R"((?:0|[1-9][0-9]*)(\.[0-9]+)?)", "0192.x", "190.25"},
        {R"(.a.)", "a\n\"\\b", "\"a\\"},
        {R"([\d\-_]{1,3}\S)", "1-_ x\t", "1-x"},
    };
    std::mt19937 rng(3);
    for (const auto& row : rows) {
        const std::string schema = json::serialize(json::object{{"type", "string"}, {"pattern", row.pattern}});
        auto g = json_schema_grammar(json::parse(schema));
        ASSERT_TRUE(g.ok()) << row.pattern << ": " << g.message();
        std::string body = row.pattern;
        if (!body.empty() && body.front() == '^') body.erase(0, 1);
        if (!body.empty() && body.back() == '$') body.pop_back();
        const std::regex re(body, std::regex::ECMAScript);
        const std::string alphabet = row.alphabet;
        std::uniform_int_distribution<size_t> len(0, 9), pick(0, alphabet.size() - 1);
        for (int i = 0; i < 4000; ++i) {
            std::string text;
            for (size_t n = len(rng); n > 0; --n) text += alphabet[pick(rng)];
            const bool want = std::regex_match(text, re);
            ASSERT_EQ(accepts(*g, encode(text)), want) << row.pattern << " on '" << text << "'";
        }
        ASSERT_TRUE(std::regex_match(std::string(row.example), re)) << row.pattern << " on its example";
        EXPECT_TRUE(accepts(*g, encode(row.example))) << row.pattern << " on '" << row.example << "'";
    }
    const grammar non_ascii = schema_grammar(R"({"type": "string", "pattern": "^[é😀]+.$"})");
    EXPECT_TRUE(accepts(non_ascii, "\"é😀é中\""));
    EXPECT_FALSE(accepts(non_ascii, "\"e😀x\""));
    const grammar escaped = schema_grammar(R"({"type": "string", "pattern": "a\\é+"})");
    EXPECT_TRUE(accepts(escaped, "\"aéé\""));
    EXPECT_FALSE(accepts(escaped, "\"aÃ\""));
    const grammar controls = schema_grammar(R"({"type": "string", "pattern": "x\\n\\t\\u0041\\x42\\0"})");
    EXPECT_TRUE(accepts(controls, R"("x\n\tAB\u0000")"));
    EXPECT_FALSE(accepts(controls, R"("xn\tAB\u0000")"));
}

// allOf of several schemas: merged (refs resolved, anyOf inside distributed, properties and required united,
// bounds tightened, a closed part keeping only its own properties).
TEST(json_schema_grammar, all_of_several_schemas_is_their_conjunction) {
    // llama.cpp's "mix of allOf, anyOf and $ref" case (like schemastore's tsconfig.json).
    const grammar mix = schema_grammar(R"({"allOf": [{"$ref": "#/definitions/foo"}, {"$ref": "#/definitions/bar"},
        {"anyOf": [{"$ref": "#/definitions/baz"}, {"$ref": "#/definitions/bam"}]}],
        "definitions": {"foo": {"properties": {"a": {"type": "number"}}}, "bar": {"properties": {"b": {"type": "number"}}},
        "bam": {"properties": {"d": {"type": "number"}}}, "baz": {"properties": {"c": {"type": "string"}}}}})");
    EXPECT_TRUE(accepts(mix, R"({"a": 1, "b": 2, "c": "x"})"));
    EXPECT_TRUE(accepts(mix, R"({"b": 2, "d": 4})"));
    EXPECT_FALSE(accepts(mix, R"({"a": "x"})"));

    const grammar both = schema_grammar(R"({"allOf": [
        {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0}}, "required": ["x"]},
        {"properties": {"y": {"type": "string"}, "x": {"maximum": 10}}, "required": ["y"], "additionalProperties": false}]})");
    EXPECT_TRUE(accepts(both, R"({"x": 3, "y": "a"})"));
    EXPECT_FALSE(accepts(both, R"({"x": 3})"));
    EXPECT_FALSE(accepts(both, R"({"x": 11, "y": "a"})"));
    EXPECT_FALSE(accepts(both, R"({"x": -1, "y": "a"})"));
    EXPECT_FALSE(accepts(both, R"({"x": 3, "y": "a", "z": 1})"));

    const grammar beside = schema_grammar(R"({"type": "integer", "allOf": [{"minimum": 2}, {"maximum": 4}]})");
    EXPECT_TRUE(accepts(beside, "3"));
    EXPECT_FALSE(accepts(beside, "5"));
    EXPECT_FALSE(accepts(beside, "2.5"));
}

TEST(json_schema_grammar, unsupported_or_malformed_schemas_are_refused_with_their_path) {
    const std::vector<std::pair<std::string_view, std::string_view>> rows = {
        {R"j({"type": "object", "properties": {"a": {"type": "string", "pattern": "(a)\\1"}}})j",
         "#/properties/a/pattern: pattern at 5: a backreference is not supported"},
        {R"j({"type": "string", "pattern": "a(?=b)"})j", "lookaround is not supported"},
        {R"j({"type": "string", "pattern": "(a*)*"})j", "a repeated part that can match nothing is not supported"},
        {R"j({"type": "string", "pattern": "[é-ü]"})j", "a range past ASCII is not supported"},
        {R"j({"type": "string", "pattern": "a{1,99999}"})j", "{n,m} beyond 4096"},
        {R"j({"type": "string", "pattern": "(ab"})j", "an unclosed '('"},
        {R"({"type": "string", "format": "ipv6"})", "#/format: the format 'ipv6' is not supported"},
        {R"({"allOf": [{"type": "string"}, {"type": "integer"}]})", "allOf parts whose types have nothing in common"},
        {R"({"allOf": [{"properties": {"a": {}}, "additionalProperties": false},
             {"properties": {"b": {}}, "required": ["b"]}]})",
         "no object satisfies every allOf part: 'b' is required"},
        {R"({"allOf": [{"const": 1}, {"const": 2}]})", "allOf parts that disagree on 'const'"},
        {R"({"type": "integer", "minimum": 5, "maximum": 4})", "no number lies between its minimum and maximum"},
        {R"({"type": "number", "minimum": "0"})", "#/minimum: must be a number"},
        {R"({"type": "array", "prefixItems": [{}, {}], "maxItems": 1})", "maxItems is below the number of prefixItems"},
        {R"({"type": "strin"})", "#/type: unknown type 'strin'"},
        {R"({"$ref": "#/$defs/missing"})", "'#/$defs/missing' names no definition"},
        {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "names 'b'"},
        {R"({"enum": []})", "#/enum: must be a non-empty array"},
        {R"({"type": "string", "maxLength": 100000})", "maxLength: must be an integer between 0 and 4096"},
        // A definition that is its own first alternative would make the matcher recurse forever.
        {R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "type": "array",
             "items": {"$ref": "#/$defs/a"}})",
         "left-recursive"},
    };
    for (const auto& [schema, message] : rows) {
        auto g = json_schema_grammar(json::parse(schema));
        ASSERT_FALSE(g.ok()) << schema;
        EXPECT_NE(g.message().find(message), std::string::npos) << g.message();
    }
}

TEST(json_schema_grammar, overlapping_alternatives_nested_deeply_keep_the_matcher_state_bounded) {
    // Each '[' doubles the ways to read the text (two identical alternatives at every level): 2^24 stacks
    // without the bound.
    const grammar g = schema_grammar(R"({"$defs": {"n": {"anyOf": [
        {"type": "array", "items": {"$ref": "#/$defs/n"}, "maxItems": 1},
        {"type": "array", "items": {"$ref": "#/$defs/n"}, "maxItems": 1}]}}, "$ref": "#/$defs/n"})");
    matcher m(g);
    grammar_state s = m.start();
    ASSERT_TRUE(m.advance(s, std::string(24, '[')));
    EXPECT_LE(s.words.size(), matcher::max_state_words);
    ASSERT_TRUE(m.advance(s, std::string(24, ']')));
    EXPECT_TRUE(matcher::complete(s));
    // A chain of 40 definitions, each two references to the next: 2^40 ways to reach the first byte.
    std::string defs;
    for (int i = 0; i < 40; ++i) {
        const std::string next =
            i == 39 ? R"({"type": "integer"})" : R"({"$ref": "#/$defs/d)" + std::to_string(i + 1) + "\"}";
        defs +=
            (i ? ", " : "") + std::string("\"d") + std::to_string(i) + "\": {\"anyOf\": [" + next + ", " + next + "]}";
    }
    const grammar chain = schema_grammar(R"({"$ref": "#/$defs/d0", "$defs": {)" + defs + "}}");
    matcher mc(chain);
    grammar_state sc = mc.start();
    EXPECT_TRUE(mc.advance(sc, "12"));
}

// A vocabulary of single bytes (ids 0..255), some longer pieces, a control token and EOS.
struct test_vocab {
    std::vector<std::string> pieces;
    int32_t eos = 0;
    int32_t control = 0;
    std::shared_ptr<const vocab_index> index;

    test_vocab() {
        for (int c = 0; c < 256; ++c) pieces.emplace_back(1, static_cast<char>(c));
        for (const char* p : {"{\"", "\":", "\"}", "}\n", " {", "name", "age", "happy", "sad", "Tom", "12", "\", \"",
                              "true", "null", "]}", "[\"", "\"]"}) {
            pieces.emplace_back(p);
        }
        control = static_cast<int32_t>(pieces.size());
        pieces.emplace_back();
        eos = static_cast<int32_t>(pieces.size());
        pieces.emplace_back();
        index = std::make_shared<vocab_index>(pieces, std::vector<int32_t>{eos});
    }
    int32_t id(std::string_view p) const {
        for (size_t i = 256; i < pieces.size(); ++i) {
            if (pieces[i] == p) return static_cast<int32_t>(i);
        }
        return static_cast<unsigned char>(p[0]);
    }
};

TEST(token_constraint, the_mask_allows_exactly_the_tokens_whose_bytes_the_grammar_accepts) {
    const test_vocab v;
    const token_constraint c(schema_grammar(person_schema), v.index);
    grammar_state s = c.start();
    const token_mask m0 = c.compute(s);
    // The root: whitespace or '{'.
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < v.index->n_vocab(); ++id) {
        if (m0.allowed(id)) allowed.push_back(id);
    }
    EXPECT_EQ(allowed, (std::vector<int32_t>{'\n', ' ', '{', v.id("{\""), v.id(" {")}));
    s = c.after(s, v.id("{\""));
    EXPECT_TRUE(c.compute(s).allowed('n'));
    EXPECT_FALSE(c.compute(s).allowed('a'));
    EXPECT_TRUE(c.compute(s).allowed(v.id("name")));
    EXPECT_FALSE(c.compute(s).allowed(v.id("age")));
    EXPECT_FALSE(c.compute(s).allowed(v.control));
    EXPECT_FALSE(c.compute(s).allowed(v.eos));
    for (std::string_view p : {"name", "\":", "\"", "Tom", "\", \"", "age", "\":", "12", ",", "\"", "mood", "\":", "\"",
                               "sad", "\", \"", "tags", "\":", "[\"", "\"]"}) {
        if (p == "mood" || p == "tags") {
            for (char ch : p) s = c.after(s, static_cast<unsigned char>(ch));
            continue;
        }
        const int32_t id = v.id(p);
        ASSERT_TRUE(c.compute(s).allowed(id)) << p;
        s = c.after(s, id);
    }
    // After the last required field: more fields or the end; '}' then nothing but EOS.
    EXPECT_FALSE(c.compute(s).allowed(v.id("}\n")));
    s = c.after(s, '}');
    const token_mask end = c.compute(s);
    EXPECT_EQ(end.count(), 1);
    EXPECT_TRUE(end.allowed(v.eos));
}

TEST(token_mask, apply_sets_exactly_the_refused_tokens_to_minus_infinity) {
    // Words all allowed, all refused and mixed, and a vocabulary ending inside the last word.
    constexpr int32_t n_vocab = 64 * 4 + 37;
    token_mask m;
    m.bits = {~uint64_t{0}, 0, 0x8000'0000'0000'0001u, 0x0123'4567'89ab'cdefu, 0x1'0000'0006u};
    std::vector<float> logits(n_vocab);
    for (int32_t i = 0; i < n_vocab; ++i) logits[static_cast<size_t>(i)] = static_cast<float>(i);
    m.apply(logits);
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (m.allowed(i)) {
            EXPECT_EQ(logits[static_cast<size_t>(i)], static_cast<float>(i)) << "token " << i;
        } else {
            EXPECT_EQ(logits[static_cast<size_t>(i)], -std::numeric_limits<float>::infinity()) << "token " << i;
        }
    }
}

TEST(token_constraint, masks_are_cached_by_state_and_a_batch_computes_each_missing_state_once) {
    const test_vocab v;
    const token_constraint c(json_object_grammar(), v.index);
    const grammar_state a = c.start();
    const grammar_state b = c.after(a, '{');
    const grammar_state* batch[] = {&a, &b, &a, &b};
    const auto masks = c.masks_for(batch);
    EXPECT_EQ(c.stats().n_computed, 2);
    EXPECT_EQ(masks[0], masks[2]);
    EXPECT_EQ(masks[1], masks[3]);
    (void)c.mask_for(c.after(c.after(b, '}'), v.eos));
    EXPECT_EQ(c.stats().n_computed, 3);
    EXPECT_EQ(c.stats().n_lookups, 5);
}

TEST(token_constraint, sampling_random_logits_under_a_schema_always_yields_a_valid_document) {
    const test_vocab v;
    auto c = std::make_shared<const token_constraint>(schema_grammar(person_schema), v.index);
    std::mt19937 gen(7);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    int n_with_optional = 0;
    for (uint64_t seed = 1; seed <= 60; ++seed) {
        sampling_params p;
        p.temperature = 1.0f;
        p.top_k = 0;
        p.top_p = 1.0f;
        p.min_p = 0.0f;
        p.seed = seed;
        p.constraint = c;
        sampler smp(p);
        std::string text;
        bool ended = false;
        for (int step = 0; step < 400 && !ended; ++step) {
            std::vector<float> logits(static_cast<size_t>(v.index->n_vocab()));
            for (auto& l : logits) l = nd(gen);
            logits[static_cast<size_t>(v.eos)] += 4.0f;  // a model that would stop early if it could
            const int32_t t = smp.sample(logits, {});
            if (t == v.eos) {
                ended = true;
            } else {
                text += v.pieces[static_cast<size_t>(t)];
            }
        }
        ASSERT_TRUE(ended) << text;
        boost::system::error_code ec;
        const json::value doc = json::parse(text, ec);
        ASSERT_FALSE(ec) << text;
        const json::object& o = doc.as_object();
        EXPECT_TRUE(o.contains("name") && o.contains("age") && o.contains("mood") && o.contains("tags")) << text;
        EXPECT_LE(o.at("name").as_string().size(), 8u * 4) << text;
        EXPECT_TRUE(o.at("age").is_int64()) << text;
        EXPECT_TRUE(o.at("mood") == "happy" || o.at("mood") == "sad") << text;
        EXPECT_LE(o.at("tags").as_array().size(), 2u) << text;
        n_with_optional += o.contains("score") || o.contains("pet");
    }
    EXPECT_GT(n_with_optional, 0);
}

TEST(sampler, logit_bias_moves_the_choice_and_minus_one_hundred_bans_a_token) {
    sampling_params p;
    p.temperature = 0.0f;
    p.logit_bias = {{1, -100.0f}, {2, 5.0f}};
    sampler s(p);
    EXPECT_EQ(s.sample(std::vector<float>{0.0f, 10.0f, 0.0f, 4.0f}, {}), 2);
    p.logit_bias = {{1, -100.0f}};
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    for (uint64_t seed = 0; seed < 200; ++seed) {
        p.seed = seed;
        sampler r(p);
        EXPECT_NE(r.sample(std::vector<float>{0.0f, 60.0f, 0.0f}, {}), 1);
    }
}

}  // namespace
}  // namespace troupe::grammar
