// tool_call_families: the parsers of the families whose calls are not Hermes-, Llama- or Mistral-style JSON
// (internal to troupe_chat; parse_tool_calls picks one by format). The formats are in tool_call_parser.h.
//   tool_call_families.cpp  GLM-4.5, MiniMax-M2, Command R7B, DeepSeek V3 / R1 / V3.1, Kimi K2: markers
//                           around JSON or XML-style arguments;
//   tool_call_literals.cpp  Gemma 4 and pythonic: arguments written as Gemma's or Python's literals, turned
//                           into JSON here.
#pragma once

#include <string_view>

#include "core/chat/tool_call_parser.h"

namespace troupe {

// DeepSeek's markers use U+FF5C (fullwidth vertical line) and U+2581 (lower one eighth block).
inline constexpr std::string_view deepseek_calls_begin = "<｜tool▁calls▁begin｜>";
inline constexpr std::string_view deepseek_calls_end = "<｜tool▁calls▁end｜>";
inline constexpr std::string_view deepseek_call_begin = "<｜tool▁call▁begin｜>";
inline constexpr std::string_view deepseek_call_end = "<｜tool▁call▁end｜>";
inline constexpr std::string_view deepseek_sep = "<｜tool▁sep｜>";

parsed_reply parse_glm45(std::string_view text);
parsed_reply parse_minimax_m2(std::string_view text);
parsed_reply parse_command_r7b(std::string_view text);
parsed_reply parse_deepseek(std::string_view text);
parsed_reply parse_kimi_k2(std::string_view text);
parsed_reply parse_gemma4(std::string_view text);
parsed_reply parse_pythonic(std::string_view text);

}  // namespace troupe
