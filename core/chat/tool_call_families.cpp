// GLM-4.5, MiniMax-M2, Command R7B, DeepSeek and Kimi K2: each finds its blocks with parse_blocks and
// reads the calls inside; any piece that is not of the family's shape makes the whole reply content.
#include "core/chat/tool_call_families.h"

#include <boost/json.hpp>

#include "core/chat/tool_call_text.h"

namespace troupe {
namespace {

using tool_text::parse_blocks;
using tool_text::parse_json;
using tool_text::skip_spaces;
using tool_text::trim;
using call_list = std::optional<std::vector<parsed_tool_call>>;

// A function name as a model writes it: no spaces, quotes, brackets or markup.
bool plausible_name(std::string_view name) {
    if (name.empty() || name.size() > 256) return false;
    for (char c : name) {
        if (tool_text::is_space(c) || std::string_view("<>{}[]()\"'`,;=").find(c) != std::string_view::npos) {
            return false;
        }
    }
    return true;
}

// `rest` (after spaces) starts with `open`: the text up to `close`, and `rest` moved past `close`.
std::optional<std::string_view> take_element(std::string_view& rest, std::string_view open, std::string_view close) {
    const std::string_view r = skip_spaces(rest);
    if (!r.starts_with(open)) return std::nullopt;
    const size_t end = r.find(close, open.size());
    if (end == std::string_view::npos) return std::nullopt;
    rest = r.substr(end + close.size());
    return r.substr(open.size(), end - open.size());
}

// A JSON object's text, compact; nullopt if `text` is not one object.
std::optional<std::string> json_object_text(std::string_view text) {
    auto v = parse_json(text);
    if (!v || !v->is_object()) return std::nullopt;
    return boost::json::serialize(*v);
}

// The calls of a block written as `begin` ... `end`, repeated with spaces between (DeepSeek, Kimi): their
// bodies. The last may lack `end` (a reply cut at the stop token).
std::optional<std::vector<std::string_view>> call_bodies(std::string_view block, std::string_view begin,
                                                         std::string_view end) {
    std::vector<std::string_view> out;
    std::string_view rest = skip_spaces(block);
    while (!rest.empty()) {
        if (!rest.starts_with(begin)) return std::nullopt;
        rest.remove_prefix(begin.size());
        const size_t stop = rest.find(end);
        if (stop == std::string_view::npos) {
            out.push_back(rest);
            break;
        }
        out.push_back(rest.substr(0, stop));
        rest = skip_spaces(rest.substr(stop + end.size()));
    }
    if (out.empty()) return std::nullopt;
    return out;
}

// GLM-4.5: "f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>..." (the template writes each value as
// `v | tojson if v is not string else v`).
call_list glm45_body(std::string_view body) {
    const size_t first_key = body.find("<arg_key>");
    parsed_tool_call call;
    call.name = trim(body.substr(0, first_key));
    if (!plausible_name(call.name)) return std::nullopt;
    boost::json::object args;
    std::string_view rest = first_key == std::string_view::npos ? std::string_view{} : body.substr(first_key);
    while (!skip_spaces(rest).empty()) {
        auto key = take_element(rest, "<arg_key>", "</arg_key>");
        if (!key) return std::nullopt;
        auto value = take_element(rest, "<arg_value>", "</arg_value>");
        if (!value) return std::nullopt;
        args[trim(*key)] = tool_text::typed_argument(*value);
    }
    call.arguments = boost::json::serialize(args);
    return std::vector{std::move(call)};
}

// MiniMax-M2: one or more <invoke name="f"><parameter name="k">v</parameter>...</invoke> in a block.
call_list minimax_body(std::string_view body) {
    std::vector<parsed_tool_call> calls;
    std::string_view rest = body;
    while (!skip_spaces(rest).empty()) {
        auto invoke = take_element(rest, "<invoke name=\"", "</invoke>");
        if (!invoke) return std::nullopt;
        const size_t name_end = invoke->find("\">");
        if (name_end == std::string_view::npos) return std::nullopt;
        parsed_tool_call call;
        call.name = std::string(invoke->substr(0, name_end));
        if (!plausible_name(call.name)) return std::nullopt;
        boost::json::object args;
        std::string_view params = invoke->substr(name_end + 2);
        while (!skip_spaces(params).empty()) {
            auto param = take_element(params, "<parameter name=\"", "</parameter>");
            if (!param) return std::nullopt;
            const size_t key_end = param->find("\">");
            if (key_end == std::string_view::npos) return std::nullopt;
            args[param->substr(0, key_end)] = tool_text::typed_argument(param->substr(key_end + 2));
        }
        call.arguments = boost::json::serialize(args);
        calls.push_back(std::move(call));
    }
    return calls;
}

// Command R7B: a JSON list of {"tool_call_id", "tool_name", "parameters"}. The tool_call_id is the call's
// index in the conversation (the template numbers them itself), not an id a client can use: left empty.
call_list command_r7b_body(std::string_view body) {
    auto v = parse_json(trim(body));
    if (!v || !v->is_array()) return std::nullopt;
    std::vector<parsed_tool_call> calls;
    for (const auto& item : v->get_array()) {
        const auto* o = item.if_object();
        const auto* name = o ? o->if_contains("tool_name") : nullptr;
        if (!name || !name->is_string()) return std::nullopt;
        parsed_tool_call call;
        call.name = std::string(name->get_string());
        const auto* params = o->if_contains("parameters");
        if (params && !params->is_null() && !params->is_object()) return std::nullopt;
        call.arguments = params && params->is_object() ? boost::json::serialize(*params) : "{}";
        calls.push_back(std::move(call));
    }
    return calls;
}

// DeepSeek V3 / R1: "function<｜tool▁sep｜>f\n```json\n{...}\n```"; V3.1: "f<｜tool▁sep｜>{...}".
call_list deepseek_body(std::string_view block) {
    auto bodies = call_bodies(block, deepseek_call_begin, deepseek_call_end);
    if (!bodies) return std::nullopt;
    std::vector<parsed_tool_call> calls;
    for (std::string_view body : *bodies) {
        const size_t sep = body.find(deepseek_sep);
        if (sep == std::string_view::npos) return std::nullopt;
        const std::string_view left = body.substr(0, sep);
        const std::string_view right = body.substr(sep + deepseek_sep.size());
        parsed_tool_call call;
        std::optional<std::string> args;
        if (skip_spaces(right).starts_with('{')) {
            call.name = trim(left);
            args = json_object_text(right);
        } else {
            const size_t fence = right.find("```json");
            const size_t close = right.rfind("```");
            if (fence == std::string_view::npos || close <= fence) return std::nullopt;
            call.name = trim(right.substr(0, fence));
            args = json_object_text(right.substr(fence + 7, close - fence - 7));
            if (!trim(right.substr(close + 3)).empty()) return std::nullopt;
        }
        if (!plausible_name(call.name) || !args) return std::nullopt;
        call.arguments = std::move(*args);
        calls.push_back(std::move(call));
    }
    return calls;
}

// Kimi K2: "functions.f:0<|tool_call_argument_begin|>{...}" per call. The id (functions.f:0) is kept: the
// template writes it back in the conversation, where the model expects its own numbering.
call_list kimi_k2_body(std::string_view block) {
    auto bodies = call_bodies(block, "<|tool_call_begin|>", "<|tool_call_end|>");
    if (!bodies) return std::nullopt;
    std::vector<parsed_tool_call> calls;
    for (std::string_view body : *bodies) {
        const std::string_view arg_begin = "<|tool_call_argument_begin|>";
        const size_t at = body.find(arg_begin);
        if (at == std::string_view::npos) return std::nullopt;
        parsed_tool_call call;
        call.id = trim(body.substr(0, at));
        std::string_view name = call.id;
        if (name.starts_with("functions.")) name.remove_prefix(std::string_view("functions.").size());
        if (const size_t colon = name.rfind(':'); colon != std::string_view::npos) {
            const std::string_view index = name.substr(colon + 1);
            if (index.empty() || index.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
            name = name.substr(0, colon);
        }
        call.name = std::string(name);
        auto args = json_object_text(body.substr(at + arg_begin.size()));
        if (!plausible_name(call.name) || !args) return std::nullopt;
        call.arguments = std::move(*args);
        calls.push_back(std::move(call));
    }
    return calls;
}

}  // namespace

parsed_reply parse_glm45(std::string_view text) {
    return parse_blocks(text, "<tool_call>", "</tool_call>", glm45_body);
}

parsed_reply parse_minimax_m2(std::string_view text) {
    return parse_blocks(text, "<minimax:tool_call>", "</minimax:tool_call>", minimax_body);
}

parsed_reply parse_command_r7b(std::string_view text) {
    return parse_blocks(text, "<|START_ACTION|>", "<|END_ACTION|>", command_r7b_body);
}

parsed_reply parse_deepseek(std::string_view text) {
    return parse_blocks(text, deepseek_calls_begin, deepseek_calls_end, deepseek_body);
}

parsed_reply parse_kimi_k2(std::string_view text) {
    return parse_blocks(text, "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", kimi_k2_body);
}

}  // namespace troupe
