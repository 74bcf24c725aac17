#include "server/response_builder.h"

#include <boost/json.hpp>

#include "server/tool_calls.h"

namespace troupe::server {
namespace json = boost::json;
namespace {

json::value usage_value(const usage& u) {
    return json::object{{"prompt_tokens", u.n_prompt_tokens},
                        {"completion_tokens", u.n_completion_tokens},
                        {"total_tokens", u.n_prompt_tokens + u.n_completion_tokens}};
}

json::value nullable(std::string_view s) {
    if (s.empty()) return nullptr;
    return json::string(s);
}

json::array bytes_of(std::string_view s) {
    json::array a;
    for (unsigned char c : s) a.emplace_back(static_cast<int>(c));
    return a;
}

// Completions: {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{tok: lp}...], "text_offset": [...]}
json::value completion_logprobs(const std::vector<token_logprob>& lps, size_t text_offset) {
    json::array tokens, token_logprobs, top, offsets;
    for (const auto& t : lps) {
        tokens.emplace_back(json::string(valid_utf8(t.token)));
        if (!t.has_logprob) {
            token_logprobs.emplace_back(nullptr);
            top.emplace_back(nullptr);
        } else {
            token_logprobs.emplace_back(t.logprob);
            json::object alts;
            for (const auto& [tok, lp] : t.top) alts[valid_utf8(tok)] = lp;
            top.emplace_back(std::move(alts));
        }
        offsets.emplace_back(static_cast<int64_t>(text_offset));
        text_offset += t.token.size();
    }
    return json::object{{"tokens", std::move(tokens)},
                        {"token_logprobs", std::move(token_logprobs)},
                        {"top_logprobs", std::move(top)},
                        {"text_offset", std::move(offsets)}};
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
json::value chat_logprobs(const std::vector<token_logprob>& lps) {
    json::array content;
    for (const auto& t : lps) {
        json::array top;
        for (const auto& [tok, lp] : t.top) {
            top.emplace_back(json::object{{"token", valid_utf8(tok)}, {"logprob", lp}, {"bytes", bytes_of(tok)}});
        }
        content.emplace_back(json::object{{"token", valid_utf8(t.token)},
                                          {"logprob", t.logprob},
                                          {"bytes", bytes_of(t.token)},
                                          {"top_logprobs", std::move(top)}});
    }
    return json::object{{"content", std::move(content)}};
}

size_t utf8_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

}  // namespace

std::string valid_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const auto lead = static_cast<unsigned char>(s[i]);
        const size_t n = utf8_length(lead);
        bool ok = n > 0 && i + n <= s.size();
        for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
        if (ok && n >= 3) {
            const auto b1 = static_cast<unsigned char>(s[i + 1]);
            if (lead == 0xE0 && b1 < 0xA0) ok = false;   // overlong
            if (lead == 0xED && b1 >= 0xA0) ok = false;  // surrogates
            if (lead == 0xF0 && b1 < 0x90) ok = false;   // overlong
            if (lead == 0xF4 && b1 >= 0x90) ok = false;  // past U+10FFFF
        }
        if (ok) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

std::string_view openai_finish_reason(finish_reason r) {
    switch (r) {
        case finish_reason::stop:
            return "stop";
        case finish_reason::length:
        case finish_reason::context_full:
            return "length";
        case finish_reason::cancelled:
            return "content_filter";
    }
    return "stop";
}

std::string error_json(const api_error& e) {
    json::object err{
        {"message", valid_utf8(e.message)}, {"type", e.type}, {"param", nullable(e.param)}, {"code", nullable(e.code)}};
    return json::serialize(json::object{{"error", std::move(err)}});
}

std::string completion_json(const generation_result& r) {
    return completion_json(r, {r});
}

std::string completion_json(const generation_result& head, const std::vector<generation_result>& choices) {
    json::array cs;
    for (const auto& r : choices) {
        cs.emplace_back(
            json::object{{"text", valid_utf8(r.text)},
                         {"index", r.index},
                         {"logprobs", r.with_logprobs ? completion_logprobs(r.logprobs, 0) : json::value(nullptr)},
                         {"finish_reason", r.finish_reason}});
    }
    json::object o{{"id", head.id},       {"object", "text_completion"}, {"created", head.created},
                   {"model", head.model}, {"choices", std::move(cs)},    {"usage", usage_value(head.use)}};
    return json::serialize(o);
}

std::string chat_completion_json(const generation_result& r) {
    return chat_completion_json(r, {r});
}

std::string chat_completion_json(const generation_result& head, const std::vector<generation_result>& choices) {
    json::array cs;
    for (const auto& r : choices) {
        json::object message = assistant_message(valid_utf8(r.text), r.tool_calls);
        cs.emplace_back(json::object{{"index", r.index},
                                     {"message", std::move(message)},
                                     {"logprobs", r.with_logprobs ? chat_logprobs(r.logprobs) : json::value(nullptr)},
                                     {"finish_reason", r.finish_reason}});
    }
    json::object o{{"id", head.id},       {"object", "chat.completion"}, {"created", head.created},
                   {"model", head.model}, {"choices", std::move(cs)},    {"usage", usage_value(head.use)}};
    return json::serialize(o);
}

std::string completion_chunk_json(const generation_result& r, std::string_view text, std::string_view finish_reason,
                                  const std::vector<token_logprob>* logprobs, bool with_usage_null) {
    json::object choice{{"text", valid_utf8(text)},
                        {"index", r.index},
                        {"logprobs", logprobs ? completion_logprobs(*logprobs, 0) : json::value(nullptr)},
                        {"finish_reason", nullable(finish_reason)}};
    json::object o{{"id", r.id},
                   {"object", "text_completion"},
                   {"created", r.created},
                   {"model", r.model},
                   {"choices", json::array{std::move(choice)}}};
    if (with_usage_null) o["usage"] = nullptr;
    return json::serialize(o);
}

std::string chat_chunk_json(const generation_result& r, std::string_view text, bool first,
                            std::string_view finish_reason, const std::vector<token_logprob>* logprobs,
                            bool with_usage_null) {
    json::object delta;
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = valid_utf8(text);
    json::object choice{{"index", r.index},
                        {"delta", std::move(delta)},
                        {"logprobs", logprobs ? chat_logprobs(*logprobs) : json::value(nullptr)},
                        {"finish_reason", nullable(finish_reason)}};
    json::object o{{"id", r.id},
                   {"object", "chat.completion.chunk"},
                   {"created", r.created},
                   {"model", r.model},
                   {"choices", json::array{std::move(choice)}}};
    if (with_usage_null) o["usage"] = nullptr;
    return json::serialize(o);
}

std::string usage_chunk_json(const generation_result& r, bool chat) {
    json::object o{{"id", r.id},
                   {"object", chat ? "chat.completion.chunk" : "text_completion"},
                   {"created", r.created},
                   {"model", r.model},
                   {"choices", json::array{}},
                   {"usage", usage_value(r.use)}};
    return json::serialize(o);
}

std::string sse_event(std::string_view json_text) {
    std::string s;
    s.reserve(json_text.size() + 8);
    s += "data: ";
    s += json_text;
    s += "\n\n";
    return s;
}

namespace {
json::object model_object(std::string_view model, int64_t created, int32_t context_length,
                          std::string_view chat_template) {
    return json::object{{"id", model},
                        {"object", "model"},
                        {"created", created},
                        {"owned_by", "troupe"},
                        {"context_length", context_length},
                        {"chat_template", chat_template}};
}
}  // namespace

std::string models_json(std::string_view model, int64_t created, int32_t context_length,
                        std::string_view chat_template) {
    return json::serialize(json::object{
        {"object", "list"}, {"data", json::array{model_object(model, created, context_length, chat_template)}}});
}

std::string model_json(std::string_view model, int64_t created, int32_t context_length,
                       std::string_view chat_template) {
    return json::serialize(model_object(model, created, context_length, chat_template));
}

std::string ws_hello_json(std::string_view model, std::string_view chat_template, int32_t context_length) {
    return json::serialize(json::object{
        {"type", "hello"}, {"model", model}, {"chat_template", chat_template}, {"context_length", context_length}});
}

std::string ws_delta_json(std::string_view id, std::string_view text) {
    return json::serialize(json::object{{"type", "delta"}, {"id", id}, {"text", valid_utf8(text)}});
}

std::string ws_done_json(std::string_view id, finish_reason r, const usage& u, const timings& t) {
    const std::string_view reason = r == finish_reason::cancelled ? "cancelled" : openai_finish_reason(r);
    json::object timing{{"ttft_ms", t.time_to_first_token_ms},
                        {"tokens_per_s", t.decode_tokens_per_s},
                        {"total_ms", t.total_ms},
                        {"queue_ms", t.queue_ms}};
    return json::serialize(json::object{{"type", "done"},
                                        {"id", id},
                                        {"finish_reason", reason},
                                        {"usage", usage_value(u)},
                                        {"timings", std::move(timing)}});
}

std::string ws_error_json(std::string_view id, std::string_view message) {
    return json::serialize(json::object{{"type", "error"}, {"id", id}, {"message", valid_utf8(message)}});
}

}  // namespace troupe::server
