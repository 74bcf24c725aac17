#include "server/tokenize_api.h"

#include <boost/json.hpp>

#include <optional>

#include "core/tokenizer/tokenizer.h"
#include "server/response_builder.h"

namespace troupe::server {
namespace json = boost::json;
namespace {

std::variant<json::object, api_error> parse_body(std::string_view body) {
    boost::system::error_code ec;
    json::parse_options opt;
    opt.max_depth = 8;
    json::value v = json::parse(body, ec, {}, opt);
    if (ec) return bad_request("the request body is not valid JSON: " + ec.message());
    if (!v.is_object()) return bad_request("the request body must be a JSON object");
    return std::move(v.as_object());
}

std::optional<api_error> read_bool(const json::value& v, std::string_view name, bool& out) {
    if (v.is_null()) return std::nullopt;
    if (!v.is_bool()) return bad_request(std::string(name) + ": expected a boolean", std::string(name));
    out = v.get_bool();
    return std::nullopt;
}

bool whole_utf8(std::string_view s) {
    return valid_utf8(s) == s;
}

}  // namespace

api_answer tokenize_answer(std::string_view body, const tokenizer& tok) {
    auto parsed = parse_body(body);
    if (auto* e = std::get_if<api_error>(&parsed)) return *e;
    const json::object& o = std::get<json::object>(parsed);
    const json::value* content = nullptr;
    bool add_special = false;
    bool parse_special = true;
    bool with_pieces = false;
    for (const auto& kv : o) {
        std::optional<api_error> e;
        if (kv.key() == "content") {
            content = &kv.value();
        } else if (kv.key() == "add_special") {
            e = read_bool(kv.value(), "add_special", add_special);
        } else if (kv.key() == "parse_special") {
            e = read_bool(kv.value(), "parse_special", parse_special);
        } else if (kv.key() == "with_pieces") {
            e = read_bool(kv.value(), "with_pieces", with_pieces);
        } else {
            e = bad_request("unknown field '" + std::string(kv.key()) +
                                "' (valid: content, add_special, parse_special, with_pieces)",
                            std::string(kv.key()));
        }
        if (e) return *e;
    }
    if (!content || !content->is_string()) {
        return bad_request("content: required, a string (the text to tokenize)", "content");
    }
    const std::vector<int32_t> ids = tok.encode(content->get_string(), add_special, parse_special);
    json::array tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
        if (!with_pieces) {
            tokens.emplace_back(id);
            continue;
        }
        const std::string& piece = tok.token_to_piece(id);
        json::value p;
        if (whole_utf8(piece)) {
            p = json::string(piece);
        } else {
            json::array bytes;
            for (unsigned char c : piece) bytes.emplace_back(static_cast<int>(c));
            p = std::move(bytes);
        }
        tokens.emplace_back(json::object{{"id", id}, {"piece", std::move(p)}});
    }
    return json::serialize(json::object{{"tokens", std::move(tokens)}});
}

api_answer detokenize_answer(std::string_view body, const tokenizer& tok) {
    auto parsed = parse_body(body);
    if (auto* e = std::get_if<api_error>(&parsed)) return *e;
    const json::object& o = std::get<json::object>(parsed);
    const json::value* tokens = nullptr;
    for (const auto& kv : o) {
        if (kv.key() != "tokens") {
            return bad_request("unknown field '" + std::string(kv.key()) + "' (valid: tokens)", std::string(kv.key()));
        }
        tokens = &kv.value();
    }
    if (!tokens || !tokens->is_array()) return bad_request("tokens: required, an array of token ids", "tokens");
    std::vector<int32_t> ids;
    ids.reserve(tokens->get_array().size());
    for (const auto& t : tokens->get_array()) {
        const bool integral = t.is_int64() || t.is_uint64();
        const int64_t id = t.is_int64() ? t.get_int64() : t.is_uint64() ? -1 : 0;
        if (!integral || id < 0 || id >= tok.n_vocab()) {
            return bad_request("tokens: " + json::serialize(t) + " is not a token id of this model (integers 0.." +
                                   std::to_string(tok.n_vocab() - 1) + ")",
                               "tokens");
        }
        ids.push_back(static_cast<int32_t>(id));
    }
    return json::serialize(json::object{{"content", valid_utf8(tok.decode(ids))}});
}

}  // namespace troupe::server
