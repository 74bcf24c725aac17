// json_kind_name: what a JSON value is, in words for error messages ("expected an object, got a string").
#pragma once

#include <boost/json/value.hpp>
#include <string>

namespace troupe::server {

inline std::string json_kind_name(const boost::json::value& v) {
    switch (v.kind()) {
        case boost::json::kind::null:
            return "null";
        case boost::json::kind::bool_:
            return "a boolean";
        case boost::json::kind::int64:
        case boost::json::kind::uint64:
            return "an integer";
        case boost::json::kind::double_:
            return "a number";
        case boost::json::kind::string:
            return "a string";
        case boost::json::kind::array:
            return "an array";
        case boost::json::kind::object:
            return "an object";
    }
    return "?";
}

}  // namespace troupe::server
