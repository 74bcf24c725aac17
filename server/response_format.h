// response_format: OpenAI's {"type": "text" | "json_object" | "json_schema", "json_schema": {...}} read
// from a request, and the token constraints that enforce it (core/sampling/grammar), compiled once per
// schema for the served model and shared by every request that names the same schema.
#pragma once

#include <boost/json/fwd.hpp>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "core/sampling/grammar/token_constraint.h"
#include "server/api_error.h"

namespace troupe {
class tokenizer;
}

namespace troupe::server {

struct response_format {
    enum class kind { text, json_object, json_schema };
    kind what = kind::text;
    std::string schema;  // json_schema: the schema, serialized
};

// Reads the request's response_format value; the error names the field.
std::optional<api_error> read_response_format(const boost::json::value& v, response_format& out);

// The compiled constraints of the last max_entries distinct formats, for one model's vocabulary.
class response_formats {
public:
    explicit response_formats(size_t max_entries = 16) : max_entries_(max_entries) {}

    using constraint_ptr = std::shared_ptr<const grammar::token_constraint>;
    // Null for text; an api_error (400, param response_format) when the schema cannot be enforced.
    std::variant<constraint_ptr, api_error> constraint(const response_format& f, const tokenizer& tok);

private:
    std::mutex mutex_;
    size_t max_entries_;
    std::shared_ptr<const grammar::vocab_index> vocab_;          // built at the first use
    std::list<std::pair<std::string, constraint_ptr>> entries_;  // most recently used first
};

}  // namespace troupe::server
