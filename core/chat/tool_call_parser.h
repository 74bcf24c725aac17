// tool_call_parser: a model's finished reply split into text content and OpenAI tool_calls, for the
// tool-call formats of the model families whose chat templates define tools:
//
//   hermes      (Hermes 2/3, Qwen2.5)  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>  (repeated)
//               (Qwen3-Coder) <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>
//   llama3      (Llama 3.1-3.3)        {"name": "f", "parameters": {...}}   the whole reply, optionally after
//                                      <|python_tag|>, several separated by ';'
//   pythonic    (Llama 3.2 / 4 and Gemma 3 pythonic templates)   [f(a=1, b="x"), g()]   the whole reply
//                                      (optionally in <|python_start|>...<|python_end|>), Python literals
//   mistral     (Mistral v3)           [TOOL_CALLS] [{"name": "f", "arguments": {...}, "id": "abc123xyz"}, ...]
//               (Mistral v7 / v11)     [TOOL_CALLS]f[ARGS]{...}   (repeated)
//   phi4        (Phi-4-mini)           <|tool_call|>{"name": "f", "arguments": {...}}<|/tool_call|>   (repeated)
//   nemotron    (Nemotron Nano v2)     <TOOLCALL>[{"name": "f", "arguments": {...}}, ...]</TOOLCALL>
//   seed_oss    (ByteDance Seed-OSS)
//               <seed:tool_call>\n<function=f>\n<parameter=k>v</parameter>\n</function>\n</seed:tool_call>
//   glm45       (GLM-4.5 / 4.6)        <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>
//   minimax_m2  (MiniMax-M2)           <minimax:tool_call>\n<invoke name="f">\n<parameter name="k">v</parameter>
//                                      \n</invoke>\n(more invokes)</minimax:tool_call>
//   command_r7b (Command R7B)          <|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {...}},
//                                      ...]<|END_ACTION|>
//   deepseek    (DeepSeek V3 / R1) <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}
//                                      \n```<｜tool▁call▁end｜>(more calls)<｜tool▁calls▁end｜>
//               (DeepSeek V3.1)        the same with f<｜tool▁sep｜>{...} in each call
//   kimi_k2     (Kimi K2)              <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0
//                                      <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
//   gemma4      (Gemma 4)              <|tool_call>call:f{k:<|"|>text<|"|>,n:2,xs:[true]}<tool_call|>   (repeated)
//
// (Gemma 3's own template defines no tools; its pythonic variants ask for the pythonic format.)
// The format is chosen from the chat template's text (detect_tool_call_format) or by name. Arguments
// come back as JSON text (OpenAI's tool_calls[].function.arguments is a string); an id is kept where the
// model wrote one that names the call (Mistral's, Kimi's functions.f:0), else left empty for the caller to
// fill ("call_" + unique id). The XML-style formats (Qwen3-Coder, Seed-OSS, GLM-4.5, MiniMax-M2) write a
// string argument as its text and any other as JSON, so a value that reads as a JSON number, true/false,
// null, object or list is taken as that, anything else as a string. A reply whose call text does not
// parse is left as content, untouched: a model that did not follow its format wrote text. Pure functions
// on finished text; the server parses when the reply is complete.
#pragma once

#include <boost/json/array.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

enum class tool_call_format {
    none,
    hermes,
    llama3,
    mistral,
    phi4,
    nemotron,
    seed_oss,
    glm45,
    minimax_m2,
    command_r7b,
    deepseek,
    kimi_k2,
    gemma4,
    pythonic,
};

// Every format, none first.
std::span<const tool_call_format> all_tool_call_formats();

std::string_view tool_call_format_name(tool_call_format format);
std::optional<tool_call_format> parse_tool_call_format_name(std::string_view name);

// The format whose markers the chat template shows: "<arg_key>" glm45 (whose template also writes
// <tool_call>), "<minimax:tool_call>" minimax_m2, "<|START_ACTION|>" command_r7b, "<｜tool▁calls▁begin｜>"
// deepseek, "<|tool_calls_section_begin|>" kimi_k2, "<|tool_call>" gemma4, "[func_name1(" pythonic,
// "<tool_call>" hermes, "<|tool_call|>" phi4, "<TOOLCALL>" nemotron, "<seed:tool_call>" seed_oss,
// "[TOOL_CALLS]" mistral, "<|start_header_id|>" with "parameters" or "<|python_tag|>" llama3; none otherwise.
tool_call_format detect_tool_call_format(std::string_view jinja_template);

// The text that opens a call in the format's replies ("<tool_call>", "[TOOL_CALLS]", ...); for llama3
// "<|python_tag|>" and for pythonic "<|python_start|>", whose calls may also be the whole reply as it opens
// ('{' and '['); empty for none.
std::string_view tool_call_open_marker(tool_call_format format);

// Every marker text the format's parser reads (open and close markers, separators). A model's GGUF may make
// them control tokens, which a detokenizer leaves out unless told to write them.
std::span<const std::string_view> tool_call_marker_texts(tool_call_format format);

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
