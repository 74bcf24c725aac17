#include "server/response_format.h"

#include <boost/json.hpp>

#include "core/sampling/grammar/json_schema_grammar.h"
#include "core/tokenizer/tokenizer.h"

namespace troupe::server {
namespace json = boost::json;

std::optional<api_error> read_response_format(const json::value& v, response_format& out) {
    const json::object* o = v.if_object();
    const json::value* type = o ? o->if_contains("type") : nullptr;
    if (!type || !type->is_string()) {
        return bad_request("response_format: expected an object with a type (text, json_object, json_schema)",
                           "response_format");
    }
    const std::string_view t = type->get_string();
    for (const auto& kv : *o) {
        if (kv.key() != "type" && !(t == "json_schema" && kv.key() == "json_schema")) {
            return bad_request(
                "response_format: unknown field '" + std::string(kv.key()) + "' for type " + std::string(t),
                "response_format");
        }
    }
    if (t == "text") {
        out = {};
        return std::nullopt;
    }
    if (t == "json_object") {
        out = {response_format::kind::json_object, {}};
        return std::nullopt;
    }
    if (t != "json_schema") {
        return bad_request(
            "response_format.type: unknown type '" + std::string(t) + "' (valid: text, json_object, json_schema)",
            "response_format");
    }
    const json::value* js = o->if_contains("json_schema");
    const json::object* jo = js ? js->if_object() : nullptr;
    if (!jo)
        return bad_request("response_format.json_schema: required, an object with name and schema", "response_format");
    for (const auto& kv : *jo) {
        const std::string_view k = kv.key();
        if (k != "name" && k != "schema" && k != "strict" && k != "description") {
            return bad_request("response_format.json_schema: unknown field '" + std::string(k) +
                                   "' (valid: name, schema, strict, description)",
                               "response_format");
        }
    }
    const json::value* name = jo->if_contains("name");
    if (!name || !name->is_string() || name->get_string().empty()) {
        return bad_request("response_format.json_schema.name: required, a non-empty string", "response_format");
    }
    const json::value* schema = jo->if_contains("schema");
    if (schema && !schema->is_object() && !schema->is_bool()) {
        return bad_request("response_format.json_schema.schema: expected an object", "response_format");
    }
    out = {response_format::kind::json_schema, schema ? json::serialize(*schema) : std::string("{}")};
    return std::nullopt;
}

std::variant<response_formats::constraint_ptr, api_error> response_formats::constraint(const response_format& f,
                                                                                       const tokenizer& tok) {
    if (f.what == response_format::kind::text) return constraint_ptr{};
    if (tok.eog_ids().empty()) {
        return bad_request(
            "response_format: this model has no end-of-generation token, so a constrained output "
            "could not end",
            "response_format");
    }
    const std::string key =
        f.what == response_format::kind::json_object ? std::string("json_object") : "schema:" + f.schema;
    std::lock_guard lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->first == key) {
            entries_.splice(entries_.begin(), entries_, it);
            return it->second;
        }
    }
    if (!vocab_) {
        std::vector<std::string> pieces(static_cast<size_t>(tok.n_vocab()));
        for (int32_t id = 0; id < tok.n_vocab(); ++id) pieces[static_cast<size_t>(id)] = tok.output_piece(id, false);
        vocab_ = std::make_shared<const grammar::vocab_index>(std::move(pieces), tok.eog_ids());
    }
    grammar::grammar g;
    if (f.what == response_format::kind::json_object) {
        g = grammar::json_object_grammar();
    } else {
        boost::system::error_code ec;
        const json::value schema = json::parse(f.schema, ec);
        if (ec) return bad_request("response_format.json_schema.schema: not valid JSON", "response_format");
        auto compiled = grammar::json_schema_grammar(schema);
        if (!compiled) return bad_request("response_format: " + compiled.message(), "response_format");
        g = std::move(compiled.value());
    }
    auto c = std::make_shared<const grammar::token_constraint>(std::move(g), vocab_);
    entries_.emplace_front(key, c);
    if (entries_.size() > max_entries_) entries_.pop_back();
    return c;
}

}  // namespace troupe::server
