// tool_call_text: the pieces the tool-call parsers share (internal to troupe_chat). Each family's parser
// (tool_call_parser.cpp, tool_call_families.cpp, tool_call_literals.cpp) finds its markers, cuts the call
// text out and turns it into parsed_tool_call; text that does not parse makes the whole reply content.
#pragma once

#include <boost/json/value.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/chat/tool_call_parser.h"

namespace troupe::tool_text {

bool is_space(char c);
std::string trim(std::string_view s);
std::string_view skip_spaces(std::string_view s);

std::optional<boost::json::value> parse_json(std::string_view text);

// {"name": ..., "arguments" | "parameters": {...} or "...", "id"?: ...} as a call; nullopt if it is not one.
std::optional<parsed_tool_call> call_of(const boost::json::value& v);

// One JSON object or array at the start of `text` (after spaces): the value and the bytes it took.
std::optional<std::pair<boost::json::value, size_t>> leading_json(std::string_view text);

// An argument written as text by an XML-style template (`v | tojson if v is not string else v`): JSON
// when it reads as a number, true/false/null, an object or a list; else the text itself as a string.
boost::json::value typed_argument(std::string_view text);

// The reply as it came, without calls: what a parser answers for text that is not a valid call.
parsed_reply as_content(std::string_view text);

// The calls in one block's body (between its markers); nullopt when the body is not a valid call.
using block_parser = std::optional<std::vector<parsed_tool_call>> (*)(std::string_view body);

// Calls between an opening and a closing marker, repeated; the text between blocks is the content. A
// last block without its closing marker (a reply cut at the stop token) runs to the end of the text.
parsed_reply parse_blocks(std::string_view text, std::string_view open_marker, std::string_view close_marker,
                          block_parser parse_body);

}  // namespace troupe::tool_text
