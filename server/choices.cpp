#include "server/choices.h"

#include <algorithm>
#include <numeric>

#include "core/tokenizer/tokenizer.h"

namespace troupe::server {

std::variant<prepared_choices, api_error> prepare_choices(const serving_model& m, const server_config& config,
                                                          generation_request& r) {
    std::vector<generation_prompt> prompts = r.prompts;
    if (prompts.empty()) prompts.push_back({r.prompt, r.prompt_ids});
    prepared_choices out;
    out.layout.n_prompts = static_cast<int32_t>(prompts.size());
    out.layout.n = r.n;
    out.layout.best_of = std::max(r.best_of, r.n);
    for (size_t p = 0; p < prompts.size(); ++p) {
        r.prompt = prompts[p].text;
        r.prompt_ids = prompts[p].ids;
        prepared prep = prepare_request(m, config, r);
        if (auto* e = std::get_if<api_error>(&prep)) {
            if (prompts.size() > 1) e->message = "prompt[" + std::to_string(p) + "]: " + e->message;
            return *e;
        }
        const prepared_request& one = std::get<prepared_request>(prep);
        if (r.echo && r.kind == api_kind::completion) {
            out.layout.echo.push_back(prompts[p].ids ? m.tok->decode(*prompts[p].ids) : prompts[p].text);
        }
        for (int32_t j = 0; j < out.layout.best_of; ++j) {
            request q = one.req;
            q.sampling.seed += static_cast<uint64_t>(j);
            if (out.layout.best_of > out.layout.n) q.logprobs = std::max(q.logprobs, 0);
            // Echo with logprobs: the prompt's tokens come first in logprobs (the engine computes them).
            q.prompt_logprobs = r.echo && r.kind == api_kind::completion && r.logprobs >= 0;
            // The prompt's choices fork from its first (request::n_forks; fork_of is set when it is submitted).
            q.n_forks = j == 0 ? out.layout.best_of - 1 : 0;
            out.requests.push_back(std::move(q));
            out.n_prompt_tokens += one.n_prompt_tokens;
        }
    }
    out.layout.tools = r.tools.format;  // set by prepare_request from the model's template
    return out;
}

choice_collector::choice_collector(generation_result head, api_kind kind, choice_layout layout, bool include_usage)
    : head_(std::move(head)), kind_(kind), layout_(std::move(layout)), include_usage_(include_usage) {
    choices_.resize(static_cast<size_t>(layout_.n_requests()));
    for (size_t i = 0; i < choices_.size(); ++i) {
        generation_result& r = choices_[i].r;
        r.id = head_.id;
        r.created = head_.created;
        r.model = head_.model;
        r.with_logprobs = head_.with_logprobs;
        r.index = client_index(static_cast<int32_t>(i));
        if (!layout_.echo.empty()) r.text = layout_.echo[i / static_cast<size_t>(layout_.best_of)];
        if (layout_.tools != tool_call_format::none) choices_[i].calls.emplace(layout_.tools);
    }
}

std::string choice_collector::call_id_prefix(int32_t i) const {
    const size_t dash = head_.id.find('-');
    return (dash == std::string::npos ? head_.id : head_.id.substr(dash + 1)) + "_" + std::to_string(i);
}

void choice_collector::parse_calls(int32_t i) {
    generation_result& r = choices_[static_cast<size_t>(i)].r;
    tool_reply reply = parse_tool_reply(layout_.tools, r.text, r.finish_reason, call_id_prefix(i));
    r.text = std::move(reply.content);
    r.tool_calls = std::move(reply.tool_calls);
    r.finish_reason = std::move(reply.finish_reason);
}

std::string choice_collector::stream_calls(int32_t i) {
    choice& c = choices_[static_cast<size_t>(i)];
    std::string rest;
    const std::vector<parsed_tool_call> calls = c.calls->finish(rest);
    std::string out;
    if (!rest.empty()) {
        const auto* lps = c.r.with_logprobs ? &c.pending : nullptr;
        out += sse_event(chat_chunk_json(c.r, rest, c.first, {}, lps, include_usage_));
        c.first = false;
        c.pending.clear();
    }
    if (!calls.empty()) {
        const boost::json::array json_calls = tool_calls_json(calls, "call_" + call_id_prefix(i) + "_");
        out += sse_event(
            chat_tool_calls_chunk_json(c.r.id, c.r.created, c.r.model, c.r.index, json_calls, c.first, include_usage_));
        c.first = false;
        if (c.r.finish_reason == "stop") c.r.finish_reason = "tool_calls";
    }
    return out;
}

int32_t choice_collector::client_index(int32_t i) const {
    return i / layout_.best_of * layout_.n + i % layout_.best_of;
}

std::string choice_collector::add(std::vector<stream_event> events, bool stream) {
    std::string out;
    const bool chat = kind_ == api_kind::chat;
    for (auto& e : events) {
        if (e.index < 0 || static_cast<size_t>(e.index) >= choices_.size()) continue;
        choice& c = choices_[static_cast<size_t>(e.index)];
        switch (e.what) {
            case stream_event::kind::logprobs:
                if (!e.logprob.prompt) c.sum_logprob += e.logprob.logprob;  // best_of ranks what it generated
                if (stream) {
                    c.pending.push_back(std::move(e.logprob));
                } else {
                    c.r.logprobs.push_back(std::move(e.logprob));
                }
                break;
            case stream_event::kind::text:
                if (!stream) {
                    c.r.text += e.text;
                    break;
                }
                {
                    // The first chunk of an echoed choice carries its prompt too.
                    std::string text = c.first ? c.r.text + e.text : e.text;
                    if (c.calls) {
                        text = c.calls->push(text);
                        if (text.empty()) break;  // held back: it may start a tool call
                    }
                    const auto* lps = c.r.with_logprobs ? &c.pending : nullptr;
                    out += sse_event(chat ? chat_chunk_json(c.r, text, c.first, {}, lps, include_usage_)
                                          : completion_chunk_json(c.r, text, {}, lps, include_usage_));
                    c.first = false;
                    c.pending.clear();
                }
                break;
            case stream_event::kind::done: {
                if (c.done) break;
                c.done = true;
                ++n_done_;
                c.r.finish_reason = std::string(openai_finish_reason(e.reason));
                c.r.use = e.use;
                cancelled_ = cancelled_ || e.reason == finish_reason::cancelled;
                if (!stream) {
                    if (layout_.tools != tool_call_format::none) parse_calls(e.index);
                    break;
                }
                if (c.calls) out += stream_calls(e.index);
                const std::string text = c.first && !c.calls ? c.r.text : std::string();
                const auto* lps = c.r.with_logprobs && !c.pending.empty() ? &c.pending : nullptr;
                out += sse_event(chat ? chat_chunk_json(c.r, text, c.first, c.r.finish_reason, lps, include_usage_)
                                      : completion_chunk_json(c.r, text, c.r.finish_reason, lps, include_usage_));
                c.first = false;
                c.pending.clear();
                break;
            }
            case stream_event::kind::error:
                if (!error_) error_ = e.text;
                break;
        }
    }
    return out;
}

usage choice_collector::total_usage() const {
    usage u;
    for (size_t i = 0; i < choices_.size(); ++i) {
        const usage& c = choices_[i].r.use;
        if (i % static_cast<size_t>(layout_.best_of) == 0) u.n_prompt_tokens += c.n_prompt_tokens;
        u.n_completion_tokens += c.n_completion_tokens;
        u.n_draft_tokens += c.n_draft_tokens;
        u.n_draft_accepted += c.n_draft_accepted;
    }
    return u;
}

std::string choice_collector::stream_end() const {
    if (!include_usage_) return {};
    generation_result r = head_;
    r.use = total_usage();
    return sse_event(usage_chunk_json(r, kind_ == api_kind::chat));
}

std::string choice_collector::whole() const {
    std::vector<generation_result> out;
    const auto best_of = static_cast<size_t>(layout_.best_of);
    for (size_t p = 0; p < static_cast<size_t>(layout_.n_prompts); ++p) {
        std::vector<size_t> order(best_of);
        std::iota(order.begin(), order.end(), p * best_of);
        if (layout_.best_of > layout_.n) {
            std::stable_sort(order.begin(), order.end(),
                             [&](size_t a, size_t b) { return choices_[a].sum_logprob > choices_[b].sum_logprob; });
        }
        for (int32_t k = 0; k < layout_.n; ++k) {
            generation_result r = choices_[order[static_cast<size_t>(k)]].r;
            r.index = static_cast<int32_t>(p) * layout_.n + k;
            out.push_back(std::move(r));
        }
    }
    generation_result head = head_;
    head.use = total_usage();
    return kind_ == api_kind::chat ? chat_completion_json(head, out) : completion_json(head, out);
}

}  // namespace troupe::server
