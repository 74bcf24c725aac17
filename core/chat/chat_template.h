// chat_template: turns a conversation (role, content messages) into the prompt text a chat model was
// trained on, for the template families most GGUF files carry.
//
// The family is detected from the GGUF's `tokenizer.chat_template` (a Jinja program we do not run) by
// its markers:
//
//   "<|start_header_id|>"      llama3   <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>...
//   "<|im_start|>"             chatml   <|im_start|>user\nHi<|im_end|>\n...
//   "<|user|>"                 zephyr   <|user|>\nHi</s>\n<|assistant|>\n
//   "[INST]" and "<<SYS>>"     llama2   [INST] <<SYS>>\nsys\n<</SYS>>\n\nHi [/INST] reply </s><s>[INST] ...
//   "[INST]"                   mistral  [INST] Hi [/INST]reply</s>[INST] ...
//   anything else, or none     plain    the contents, one per line (continuation models such as stories260K)
//
// The rendered text never starts with the BOS token: the tokenizer adds it (add_bos) exactly as for a
// plain prompt. BOS / EOS inside the text (llama2's "</s><s>" between turns) use the vocabulary's own
// token texts and are matched as control tokens when the text is encoded with parse_special.
// Every rendering ends with the assistant's turn opened, so the model writes the reply.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace troupe {

enum class chat_template_kind { llama2, llama3, chatml, zephyr, mistral, plain };

std::string_view chat_template_name(chat_template_kind kind);
std::optional<chat_template_kind> parse_chat_template_name(std::string_view name);

// The family whose markers the Jinja text shows; plain when none matches or the text is empty.
chat_template_kind detect_chat_template(std::string_view jinja);

struct chat_message {
    std::string role;  // system, user, assistant
    std::string content;
};

// The texts of the model's special tokens used between turns ("<s>", "</s>"); empty when it has none.
struct chat_special_tokens {
    std::string bos;
    std::string eos;
};

// A valid role: system, user, assistant (developer is read as system, as OpenAI does).
bool valid_chat_role(std::string_view role);

// The prompt text for the messages, the assistant's turn opened at the end (see above).
std::string render_chat(chat_template_kind kind, std::span<const chat_message> messages,
                        const chat_special_tokens& tokens);

}  // namespace troupe
