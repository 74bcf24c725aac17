#include "server/serving.h"

#include <atomic>

#include <boost/json.hpp>

#include "core/log/log.h"
#include "core/tokenizer/tokenizer.h"

namespace troupe::server {

void set_chat_template(serving_model& m, std::string_view jinja) {
    m.chat_format = std::make_shared<const chat_formatter>(
        chat_formatter::from_model(jinja, m.tok ? chat_tokens_from(*m.tok) : chat_template_tokens{}));
    TROUPE_LOG_INFO("serve", "chat template: %s", m.chat_format->why().c_str());
    m.chat = detect_chat_template(jinja);
    m.facts.chat_template = m.chat_format->name();
    if (m.tok) {
        const int32_t bos = m.tok->bos_id();
        const int32_t eos = m.tok->eos_id();
        m.special.bos = bos >= 0 ? m.tok->token_to_piece(bos) : std::string();
        m.special.eos = eos >= 0 ? m.tok->token_to_piece(eos) : std::string();
    }
}

prepared prepare_request(const serving_model& m, const server_config& config, generation_request& r) {
    if (!r.model.empty() && r.model != m.facts.name) {
        return api_error{404, "The model '" + r.model + "' does not exist; this server serves '" + m.facts.name + "'",
                         "invalid_request_error", "model", "model_not_found"};
    }
    prepared_request p;
    std::vector<int32_t> ids;
    if (r.kind == api_kind::chat) {
        std::string text;
        if (auto e = resolve_tools(m.chat_format.get(), r.tools, r.format)) return *e;
        // The markers the reply is parsed by are written even where the GGUF makes them control tokens.
        const auto markers = tool_call_marker_texts(r.tools.format);
        r.sampling.shown_special_tokens.assign(markers.begin(), markers.end());
        if (m.chat_format) {
            boost::json::array messages = r.messages_json.empty() ? messages_to_json(r.messages) : r.messages_json;
            if (m.chat_format->wants_text_arguments()) messages = arguments_as_text(messages);
            auto rendered =
                m.chat_format->prompt_for_tokenizer({&messages, template_tools(r.tools), true, &r.template_kwargs});
            if (!rendered) {
                return bad_request("messages: the model's chat template failed: " + rendered.message(), "messages");
            }
            text = std::move(*rendered);
        } else {
            text = render_chat(m.chat, r.messages, m.special);
        }
        ids = m.tok->encode(text, true, true);
    } else if (r.prompt_ids) {
        for (int32_t id : *r.prompt_ids) {
            if (id < 0 || id >= m.tok->n_vocab()) {
                return bad_request("prompt: token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                       std::to_string(m.tok->n_vocab() - 1) + ")",
                                   "prompt");
            }
        }
        ids = *r.prompt_ids;
    } else {
        ids = m.tok->encode(r.prompt, true, true);
    }
    if (ids.empty()) return bad_request("prompt: the prompt is empty (no tokens)", "prompt");
    const int32_t limit = config.max_prompt_tokens > 0 ? std::min(config.max_prompt_tokens, m.n_ctx - 1) : m.n_ctx - 1;
    const auto n = static_cast<int64_t>(ids.size());
    const std::string what = r.kind == api_kind::chat ? "messages" : "prompt";
    if (n > limit) {
        return context_exceeded("This model's maximum context length is " + std::to_string(m.n_ctx) +
                                    " tokens and prompts may have at most " + std::to_string(limit) +
                                    " tokens. However, your " + what + " has " + std::to_string(n) +
                                    " tokens. Please reduce the length of the " + what + ".",
                                what);
    }
    // OpenAI refuses an explicit max_tokens that does not fit beside the prompt; the config's default is
    // an upper bound only (the engine stops at the context's end, finish_reason "length").
    const int64_t n_room = m.n_ctx - n;
    if (r.max_tokens_given && !r.truncate_to_context && r.sampling.max_tokens > n_room) {
        return context_exceeded(
            "This model's maximum context length is " + std::to_string(m.n_ctx) + " tokens. However, you requested " +
                std::to_string(n + r.sampling.max_tokens) + " tokens (" + std::to_string(n) + " in the " + what + ", " +
                std::to_string(r.sampling.max_tokens) + " in the completion). Please reduce the length of the " + what +
                " or completion, or send \"truncate_to_context\": true to stop at the "
                "context's end.",
            "max_tokens");
    }
    for (const auto& [id, bias] : r.sampling.logit_bias) {
        if (id >= m.tok->n_vocab()) {
            return bad_request("logit_bias: token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                   std::to_string(m.tok->n_vocab() - 1) + ")",
                               "logit_bias");
        }
    }
    if (r.format.what != response_format::kind::text) {
        if (r.sampling.ignore_eos) {
            return bad_request("ignore_eos: cannot be used with response_format (the output ends with the JSON value)",
                               "ignore_eos");
        }
        auto c = m.formats->constraint(r.format, *m.tok);
        if (auto* e = std::get_if<api_error>(&c)) return *e;
        r.sampling.constraint = std::get<response_formats::constraint_ptr>(std::move(c));
    }
    p.n_prompt_tokens = static_cast<int32_t>(n);
    p.req.sampling = r.sampling;
    p.req.prompt_ids = std::move(ids);
    p.req.logprobs = r.logprobs;
    return p;
}

std::optional<api_error> check_admission(const server_config& config, const server_stats& stats,
                                         int32_t n_prompt_tokens) {
    const int64_t n_queued = stats.n_queued.load();
    const int64_t n_tokens = stats.n_queued_tokens.load();
    if (n_queued + 1 > config.max_queue_requests) {
        return overloaded("The server is overloaded: " + std::to_string(n_queued) +
                          " requests are waiting (server.max_queue_requests = " +
                          std::to_string(config.max_queue_requests) + "); retry later");
    }
    if (n_queued > 0 && n_tokens + n_prompt_tokens > config.max_queue_tokens) {
        return overloaded("The server is overloaded: " + std::to_string(n_tokens) +
                          " prompt tokens are waiting (server.max_queue_tokens = " +
                          std::to_string(config.max_queue_tokens) + "); retry later");
    }
    return std::nullopt;
}

api_error engine_error(const std::string& message) {
    if (message.starts_with("overloaded")) return overloaded(message);
    if (message.find("draining") != std::string::npos || message.find("stopping") != std::string::npos ||
        message.find("stopped") != std::string::npos || message.find("not started") != std::string::npos) {
        return unavailable(message);
    }
    return api_error{500, message, "server_error", {}, {}};
}

std::string next_response_id(api_kind kind) {
    static std::atomic<int64_t> next{1};
    return std::string(kind == api_kind::chat ? "chatcmpl-" : "cmpl-") + std::to_string(next.fetch_add(1));
}

}  // namespace troupe::server
