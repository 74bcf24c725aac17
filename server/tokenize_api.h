// tokenize_api: llama-server's POST /tokenize and POST /detokenize, with its bodies.
//   /tokenize    {"content": "text", "add_special": false, "parse_special": true, "with_pieces": false}
//                -> {"tokens": [15043, 3186]}   or, with_pieces, {"tokens": [{"id": 15043, "piece": " Hello"}]}
//                (a piece that is not whole UTF-8 comes as its bytes: "piece": [226, 150])
//   /detokenize  {"tokens": [15043, 3186]} -> {"content": "Hello world"}
// add_special adds the vocabulary's BOS (and EOS where it asks for one), as a prompt gets it; parse_special
// matches control tokens written in the text. Unknown fields and ids outside the vocabulary are 400s.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "server/api_error.h"

namespace troupe {
class tokenizer;
}

namespace troupe::server {

// The response body, or the error to answer.
using api_answer = std::variant<std::string, api_error>;

api_answer tokenize_answer(std::string_view body, const tokenizer& tok);
api_answer detokenize_answer(std::string_view body, const tokenizer& tok);

}  // namespace troupe::server
