// api_json: reading the server's answers in tests — a body as a JSON object, a string field, the events
// of an SSE body — with a test failure (not an exception) for anything that is not what it claims to be.
#pragma once

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <string>
#include <vector>

namespace troupe::testing {

inline boost::json::object parse_object(const std::string& body) {
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(body, ec);
    if (ec || !v.is_object()) {
        ADD_FAILURE() << "not a JSON object: " << body.substr(0, 300);
        return {};
    }
    return v.as_object();
}

// A string member, or "" when absent or not a string.
inline std::string str_of(const boost::json::object& o, std::string_view key) {
    const boost::json::value* v = o.if_contains(key);
    return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

// The "error" object of an OpenAI-style error body (empty, with a failure, when there is none).
inline boost::json::object error_of(const std::string& body) {
    boost::json::object o = parse_object(body);
    const boost::json::value* e = o.if_contains("error");
    if (!e || !e->is_object()) {
        ADD_FAILURE() << "no error object in: " << body.substr(0, 300);
        return {};
    }
    return e->as_object();
}

// The JSON payloads of an SSE body, in order, without [DONE]; done says whether [DONE] was there.
inline std::vector<boost::json::object> sse_objects(const std::string& body, bool& done) {
    std::vector<boost::json::object> out;
    done = false;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
        const size_t end = body.find("\n\n", pos);
        if (end == std::string::npos) break;
        const std::string data = body.substr(pos + 6, end - pos - 6);
        if (data == "[DONE]") {
            done = true;
        } else {
            out.push_back(parse_object(data));
        }
        pos = end + 2;
    }
    return out;
}

}  // namespace troupe::testing
