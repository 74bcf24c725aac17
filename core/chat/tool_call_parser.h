// tool_call_parser: a model's finished reply split into text content and OpenAI tool_calls, for the
// tool-call formats of the model families whose chat templates define tools:
//
//   hermes   (Hermes 2/3, Qwen2.5)   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   (repeated)
//            (Qwen3-Coder) <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>
//   llama3   (Llama 3.1-3.3)         {"name": "f", "parameters": {...}}   the whole reply, optionally after
//                                    <|python_tag|>, several separated by ';'
//   mistral  (Mistral v3)            [TOOL_CALLS] [{"name": "f", "arguments": {...}, "id": "abc123xyz"}, ...]
//            (Mistral v7 / v11)      [TOOL_CALLS]f[ARGS]{...}   (repeated)
//   phi4     (Phi-4-mini)            <|tool_call|>{"name": "f", "arguments": {...}}<|/tool_call|>   (repeated)
//   nemotron (Nemotron Nano v2)      <TOOLCALL>[{"name": "f", "arguments": {...}}, ...]</TOOLCALL>
//   seed_oss (ByteDance Seed-OSS)
//   <seed:tool_call>\n<function=f>\n<parameter=k>v</parameter>\n</function>\n</seed:tool_call>
//
// The format is chosen from the chat template's text (detect_tool_call_format) or by name. Arguments
// come back as JSON text (OpenAI's tool_calls[].function.arguments is a string); an id is kept where the
// model wrote one, else left empty for the caller to fill ("call_" + unique id). A reply whose call text
// is not valid JSON is left as content, untouched: a model that did not follow its format wrote text.
// Pure functions on finished text; the server parses when the reply is complete.
#pragma once

#include <boost/json/array.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

enum class tool_call_format { none, hermes, llama3, mistral, phi4, nemotron, seed_oss };

std::string_view tool_call_format_name(tool_call_format format);
std::optional<tool_call_format> parse_tool_call_format_name(std::string_view name);

// The format whose markers the chat template shows: "<tool_call>" hermes, "<|tool_call|>" phi4, "<TOOLCALL>"
// nemotron, "<seed:tool_call>" seed_oss, "[TOOL_CALLS]" mistral, "<|start_header_id|>" with "parameters" or
// "<|python_tag|>" llama3; none otherwise.
tool_call_format detect_tool_call_format(std::string_view jinja_template);

struct parsed_tool_call {
    std::string id;  // as the model wrote it, or empty
    std::string name;
    std::string arguments;  // JSON text of the arguments object
};

struct parsed_reply {
    std::string content;  // the text outside the calls (trimmed where calls were cut out)
    std::vector<parsed_tool_call> tool_calls;
};

parsed_reply parse_tool_calls(tool_call_format format, std::string_view text);

// The calls as OpenAI's message.tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}],
// a call without an id named id_prefix + its index ("call_<response id>_0", ...).
boost::json::array tool_calls_json(const std::vector<parsed_tool_call>& calls, std::string_view id_prefix);

}  // namespace troupe
