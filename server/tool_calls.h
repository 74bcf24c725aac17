// tool_calls: OpenAI's function calling on /v1/chat/completions — the request's `tools` and `tool_choice`,
// the conversation's tool turns (assistant messages with `tool_calls`, role "tool" messages with
// `tool_call_id`) handed to the model's own chat template as transformers' apply_chat_template hands them,
// and the model's reply parsed back into `tool_calls` by its family's format (core/chat/tool_call_parser).
//
//   request  {"tools": [{"type": "function", "function": {"name", "description", "parameters"}}],
//             "tool_choice": "auto" | "none" | "required" | {"type": "function", "function": {"name"}}}
//   template messages (tool_calls' arguments as objects, as Hermes/Qwen/Llama templates expect), tools
//   reply    the format the template shows (<tool_call> hermes, [TOOL_CALLS] mistral, <|python_tag|> or
//            ipython llama3, and the other families of core/chat/tool_call_parser.h):
//            {"role": "assistant", "content": text or null, "tool_calls": [{"id": "call_...",
//            "type": "function", "function": {"name", "arguments": "<JSON text>"}}]}, finish_reason "tool_calls"
//
// tool_choice "required" or {"type": "function", "function": {"name"}} forces a call by constrained decoding:
// for the llama3 format, whose call is the whole reply as JSON, the reply is held to the JSON schema
// {"anyOf": [{"name": const, "parameters": the tool's parameters}, ...]} (response_format's grammar).
// Refused with 400 (naming tools / tool_choice): tools for a model whose template never reads `tools` or
// whose tool-call format troupe does not parse (rendering them anyway would answer text the client takes
// for a refusal to call), and required / named for every format but llama3 (their calls sit inside text
// markers or Python syntax the JSON grammar cannot write) or beside a response_format. tool_choice "none"
// renders without the tools and answers text, as OpenAI does.
// Streaming: text is sent as it comes except what may be the start of a call (a marker's prefix, or a
// reply that opens with '{' for llama3 and with '[' for pythonic); the calls are sent whole when the reply
// ends, as one delta carrying each call's index, id, name and arguments, then finish_reason "tool_calls".
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/fwd.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/chat/tool_call_parser.h"
#include "server/api_error.h"
#include "server/response_format.h"

namespace troupe {
class chat_formatter;
}

namespace troupe::server {

enum class tool_choice_mode { none, automatic, required };

struct tool_request {
    boost::json::array tools;  // the client's tool objects, checked
    bool given = false;        // "tools" was in the request with at least one tool
    bool choice_given = false;
    tool_choice_mode choice = tool_choice_mode::automatic;
    std::string forced_name;  // tool_choice {"type": "function", "function": {"name"}}: the one to call
    tool_call_format format = tool_call_format::none;  // set when rendered: how to parse the reply (none: text)
    bool conversation_has_tools = false;               // a tool message or an assistant's tool_calls
};

std::optional<api_error> read_tools(const boost::json::value& v, tool_request& out);
std::optional<api_error> read_tool_choice(const boost::json::value& v, tool_request& out);
// After every field: tool_choice without tools is an error, as OpenAI answers.
std::optional<api_error> finish_tools(const tool_request& t);

// A message's assistant tool_calls checked (`where` like "messages[2].tool_calls") and given as the
// template sees them: each call's function.arguments parsed from JSON text into an object.
std::optional<api_error> read_message_tool_calls(const boost::json::value& v, const std::string& where,
                                                 boost::json::array& out);

// Whether the formatter can render the request's tools and tool turns; sets t.format to the reply's
// format (none when the request has no tools or tool_choice is none). `formatter` null: built-in rendering.
// tool_choice required or named: `format` becomes the JSON schema of the allowed calls (constrained
// decoding), for formats whose call is the whole reply as JSON (llama3); others are a 400.
std::optional<api_error> resolve_tools(const chat_formatter* formatter, tool_request& t, response_format& format);

// The tools the template gets: null (None) without tools or with tool_choice none.
const boost::json::array* template_tools(const tool_request& t);

// A finished reply split by the format: the content that is left and the calls as OpenAI's tool_calls
// (ids "call_<id_prefix>_<k>" where the model wrote none); finish_reason becomes "tool_calls" when there
// are calls and the model stopped by itself.
struct tool_reply {
    std::string content;
    boost::json::array tool_calls;
    std::string finish_reason;
};
tool_reply parse_tool_reply(tool_call_format format, std::string_view text, std::string_view finish_reason,
                            std::string_view id_prefix);

// The assistant message of a whole chat completion: content (null when only calls), tool_calls when any.
boost::json::object assistant_message(std::string_view content, const boost::json::array& tool_calls);

// Streaming: what of the reply may be sent as content now, holding back what may start a tool call.
class tool_call_stream {
public:
    explicit tool_call_stream(tool_call_format format) : format_(format) {}
    // The text to send now (may be empty).
    std::string push(std::string_view delta);
    // At the end: the content not yet sent and the calls (empty when the held text was not a call).
    std::vector<parsed_tool_call> finish(std::string& rest_content);

private:
    tool_call_format format_;
    std::string held_;
    bool in_call_ = false;
    bool at_start_ = true;  // llama3, pythonic: nothing but spaces sent yet
};

// A streamed chunk carrying the calls: delta {"tool_calls": [{"index", "id", "type", "function"}]}
// (and the role when it is the choice's first chunk).
std::string chat_tool_calls_chunk_json(std::string_view id, int64_t created, std::string_view model, int32_t index,
                                       const boost::json::array& tool_calls, bool first, bool with_usage_null);

}  // namespace troupe::server
