#include "core/sampling/grammar/json_schema_all_of.h"

#include <boost/json.hpp>

#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

namespace troupe::grammar {
namespace json = boost::json;
namespace {

class merger {
public:
    explicit merger(const json::value* root) : root_(root) {}

    std::optional<schema_error> error;

    // The definition a {"$ref": ...} schema names (following refs to refs), else the schema itself; null (the
    // error set) where a ref names nothing.
    const json::value* resolved(const json::value& s, const std::string& path) {
        const json::value* at = &s;
        for (int depth = 0; depth < 16; ++depth) {
            const json::object* o = at->if_object();
            const json::value* ref = o ? o->if_contains("$ref") : nullptr;
            if (!ref || !ref->is_string()) return at;
            const json::value* found = definition(std::string(ref->get_string()), path);
            if (!found) return nullptr;
            at = found;
        }
        return at;
    }

    // See json_schema_all_of.h.
    std::optional<json::value> merge_all_of(const json::array& parts, const std::string& path) {
        std::vector<std::vector<json::object>> ways = {{}};
        for (size_t i = 0; i < parts.size(); ++i) {
            const json::value* part = resolved(parts[i], path + "/" + std::to_string(i));
            if (!part) return std::nullopt;
            if (!part->is_object()) {
                fail(path + "/" + std::to_string(i), "allOf of several schemas takes object schemas");
                return std::nullopt;
            }
            json::object base = part->get_object();
            const json::value* options = nullptr;
            for (const char* key : {"anyOf", "oneOf"}) {
                if (const json::value* v = base.if_contains(key)) options = v;
            }
            std::vector<json::object> alternatives;
            if (options == nullptr) {
                alternatives.push_back(base);
            } else {
                if (!options->is_array() || options->get_array().empty()) {
                    fail(path, "an anyOf / oneOf inside allOf must be a non-empty array");
                    return std::nullopt;
                }
                const json::array choices = options->get_array();
                base.erase("anyOf");
                base.erase("oneOf");
                for (const auto& c : choices) {
                    const json::value* r = resolved(c, path);
                    if (!r) return std::nullopt;
                    if (!r->is_object()) {
                        fail(path, "allOf of several schemas takes object schemas");
                        return std::nullopt;
                    }
                    auto both = merge_two({base, r->get_object()}, path);
                    if (!both) return std::nullopt;
                    alternatives.push_back(std::move(*both));
                }
            }
            std::vector<std::vector<json::object>> next;
            for (const auto& way : ways) {
                for (const auto& alt : alternatives) {
                    next.push_back(way);
                    next.back().push_back(alt);
                }
            }
            if (next.size() > 64) {
                fail(path, "allOf with anyOf inside it makes more than 64 combinations");
                return std::nullopt;
            }
            ways = std::move(next);
        }
        json::array merged;
        for (const auto& way : ways) {
            auto one = merge_two(way, path);
            if (!one) return std::nullopt;
            merged.push_back(std::move(*one));
        }
        if (merged.size() == 1) return std::move(merged[0]);
        return json::value(json::object{{"anyOf", std::move(merged)}});
    }

    // The parts (object schemas, refs resolved) as one schema (merge_all_of's rules).
    std::optional<json::object> merge_two(const std::vector<json::object>& parts, const std::string& path) {
        static constexpr std::string_view lower[] = {"minLength", "minItems", "minimum", "exclusiveMinimum"};
        static constexpr std::string_view upper[] = {"maxLength", "maxItems", "maximum", "exclusiveMaximum"};
        static constexpr std::string_view notes[] = {"title",   "description", "default", "examples",   "$comment",
                                                     "$schema", "$id",         "$defs",   "definitions"};
        const auto in = [](std::string_view k, const auto& list) {
            return std::find(std::begin(list), std::end(list), k) != std::end(list);
        };
        const auto number_of = [](const json::value& v) {
            return v.is_int64()    ? static_cast<double>(v.get_int64())
                   : v.is_uint64() ? static_cast<double>(v.get_uint64())
                   : v.is_double() ? v.get_double()
                                   : 0.0;
        };
        const auto types_of = [](const json::value& t) {
            std::vector<std::string> out;
            if (t.is_string()) out.emplace_back(t.get_string());
            if (const auto* a = t.if_array()) {
                for (const auto& x : *a) {
                    if (x.is_string()) out.emplace_back(x.get_string());
                }
            }
            return out;
        };
        json::object out;
        std::vector<std::vector<std::string>> closed;  // the properties of each part that closes its object
        for (const json::object& part : parts) {
            if (const json::value* extra = part.if_contains("additionalProperties");
                extra && extra->is_bool() && !extra->get_bool()) {
                std::vector<std::string> names;
                if (const json::value* props = part.if_contains("properties"); props && props->is_object()) {
                    for (const auto& kv : props->get_object()) names.emplace_back(kv.key());
                }
                closed.push_back(std::move(names));
            }
            for (const auto& kv : part) {
                const std::string_view k = kv.key();
                json::value* have = out.if_contains(k);
                if (have == nullptr) {
                    out[k] = kv.value();
                } else if (in(k, notes)) {
                    // the first part's stays
                } else if (k == "properties" && have->is_object() && kv.value().is_object()) {
                    for (const auto& p : kv.value().get_object()) {
                        json::object& props = have->get_object();
                        if (json::value* same = props.if_contains(p.key())) {
                            *same = json::object{{"allOf", json::array{*same, p.value()}}};
                        } else {
                            props[p.key()] = p.value();
                        }
                    }
                } else if (k == "required" && have->is_array() && kv.value().is_array()) {
                    for (const auto& n : kv.value().get_array()) {
                        const auto& list = have->get_array();
                        if (std::find(list.begin(), list.end(), n) == list.end()) have->get_array().push_back(n);
                    }
                } else if (k == "type") {
                    std::vector<std::string> both;
                    for (const std::string& a : types_of(*have)) {
                        for (const std::string& b : types_of(kv.value())) {
                            if (a == b || (a == "integer" && b == "number")) both.push_back(a);
                            if (a == "number" && b == "integer") both.push_back(b);
                        }
                    }
                    if (both.empty()) {
                        fail(path, "allOf parts whose types have nothing in common");
                        return std::nullopt;
                    }
                    json::array types;
                    for (const auto& t : both) types.emplace_back(t);
                    *have = types.size() == 1 ? json::value(types[0]) : json::value(std::move(types));
                } else if (in(k, lower) && have->is_number() && kv.value().is_number()) {
                    if (number_of(kv.value()) > number_of(*have)) *have = kv.value();
                } else if (in(k, upper) && have->is_number() && kv.value().is_number()) {
                    if (number_of(kv.value()) < number_of(*have)) *have = kv.value();
                } else if (k == "items" || (k == "additionalProperties" && !have->is_bool() && !kv.value().is_bool())) {
                    *have = json::object{{"allOf", json::array{*have, kv.value()}}};
                } else if (k == "additionalProperties") {
                    if (have->is_bool() && have->get_bool()) *have = kv.value();
                    if (kv.value().is_bool() && !kv.value().get_bool()) *have = false;
                } else if (*have != kv.value()) {
                    fail(path, "allOf parts that disagree on '" + std::string(k) + "' are not supported");
                    return std::nullopt;
                }
            }
        }
        // A part that closes its object admits only its own properties.
        if (!closed.empty()) {
            if (json::value* props = out.if_contains("properties"); props && props->is_object()) {
                json::object kept;
                for (const auto& kv : props->get_object()) {
                    bool everywhere = true;
                    for (const auto& names : closed) {
                        everywhere = everywhere && std::find(names.begin(), names.end(), kv.key()) != names.end();
                    }
                    if (everywhere) kept[kv.key()] = kv.value();
                }
                *props = std::move(kept);
            }
            out["additionalProperties"] = false;
            if (const json::value* req = out.if_contains("required"); req && req->is_array()) {
                const json::value* props = out.if_contains("properties");
                for (const auto& n : req->get_array()) {
                    if (!n.is_string() || !props || !props->get_object().contains(n.get_string())) {
                        fail(path, "no object satisfies every allOf part: '" +
                                       std::string(n.is_string() ? n.get_string() : "") +
                                       "' is required but a part with additionalProperties false does not name it");
                        return std::nullopt;
                    }
                }
            }
        }
        return out;
    }

private:
    const json::value* root_;

    void fail(const std::string& path, const std::string& message) {
        if (!error) error = schema_error{path, message};
    }

    const json::value* definition(const std::string& target, const std::string& path) {
        auto def = schema_definition(root_, target);
        if (auto* e = std::get_if<std::string>(&def)) {
            fail(path, *e);
            return nullptr;
        }
        return std::get<const json::value*>(def);
    }
};

}  // namespace

std::variant<const json::value*, std::string> schema_definition(const json::value* root, const std::string& target) {
    for (std::string_view prefix : {"#/$defs/", "#/definitions/"}) {
        if (!target.starts_with(prefix)) continue;
        const json::value* defs =
            root && root->is_object() ? root->get_object().if_contains(prefix.substr(2, prefix.size() - 3)) : nullptr;
        const json::value* def =
            defs && defs->is_object() ? defs->get_object().if_contains(target.substr(prefix.size())) : nullptr;
        if (!def) return "'" + target + "' names no definition";
        return def;
    }
    return std::string("only references into #/$defs/ or #/definitions/ are supported");
}

std::variant<json::value, schema_error> merge_all_of(const json::value* root, const json::array& parts,
                                                     const std::string& path) {
    merger m(root);
    auto merged = m.merge_all_of(parts, path);
    if (!merged) return m.error.value_or(schema_error{path, "allOf could not be merged"});
    return std::move(*merged);
}

}  // namespace troupe::grammar
