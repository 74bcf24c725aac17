// troupe run --model M.gguf --prompt "..." [sampling flags] [--config C.yaml]: generate and stream the text
// to stdout. With --chat the prompt is the user's message (after an optional --system message), rendered by
// the model's own chat template (the built-ins as fallback; which one and why goes to stderr), and only the
// reply is printed.
//
// Structure: run_spec() declares the flags; prepare_run() turns them into a validated run_inputs (the
// effective config and the prompt), with every problem reported at once; run_command() then drives the
// engine: the model loads as the config says, the request flows through the five actors, and each text
// delta is written to stdout as it arrives. The summary (tokens, speed, pipeline overhead) goes to stderr.
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>

#include <boost/json.hpp>

#include "actors/engine/engine.h"
#include "actors/engine/engine_from_model.h"
#include "actors/engine/engine_params_from.h"
#include "core/chat/chat_formatter.h"
#include "core/loader/model_loader.h"

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/config/engine_config.h"

namespace troupe::cli {
namespace {

struct run_inputs {
    engine_config config;  // defaults < --config < $TROUPE_MODEL < flags; config.sampling is the request's
    std::string prompt;    // backslash escapes already applied
    bool chat = false;     // --chat: the prompt is a user message for the model's chat template
    std::string system;    // --system: the chat's system message, if any
};

// Exit code on failure; the message is printed here.
result<run_inputs> prepare_run(const cli_args& args) {
    auto config = resolve_cli_config(args);
    if (!config) return config.err();
    run_inputs in{std::move(*config), unescape(args.value_or("--prompt", "")), args.has("--chat"),
                  unescape(args.value_or("--system", ""))};
    if (args.has("--system") && !in.chat) return make_error("--system needs --chat");
    if (args.has("--print-config")) return in;
    auto model = resolve_model_path(in.config);
    if (!model) return model.err();
    in.config.model = *model;
    if (!args.has("--prompt")) return make_error("--prompt is required");
    return in;
}

// The outcome of the one request, filled by the sink on the streamer's lane.
struct run_outcome {
    std::mutex mutex;
    std::condition_variable cv;
    bool ended = false;
    std::string error;
    finish_reason reason = finish_reason::stop;
    usage use;
    timings time;
};

// --chat: the conversation (system?, user) as the model's chat template renders it, BOS left to the tokenizer.
result<std::string> chat_prompt(const loaded_model& model, const run_inputs& in) {
    const chat_formatter f =
        chat_formatter::from_model(model.file->string_or("tokenizer.chat_template", ""), chat_tokens_from(*model.tok));
    std::fprintf(stderr, "troupe run: chat template: %s\n", f.why().c_str());
    boost::json::array messages;
    if (!in.system.empty()) messages.push_back(boost::json::object{{"role", "system"}, {"content", in.system}});
    messages.push_back(boost::json::object{{"role", "user"}, {"content", in.prompt}});
    return f.prompt_for_tokenizer({&messages, nullptr, true});
}

int generate(const engine_config& config, const run_inputs& in) {
    set_log_level(config.log_level);
    auto model = load_model(config, load_options{.kv_groups = true});
    if (!model) {
        std::fprintf(stderr, "troupe run: %s\n", model.message().c_str());
        return exit_failure;
    }
    std::string prompt = in.prompt;
    if (in.chat) {
        auto rendered = chat_prompt(*model, in);
        if (!rendered) {
            std::fprintf(stderr, "troupe run: the chat template failed: %s\n", rendered.message().c_str());
            return exit_failure;
        }
        prompt = std::move(*rendered);
    }
    engine_params params = engine_params_from(config);
    engine_parts parts = engine_parts_from(*model, params);
    engine eng(std::move(parts), params);
    if (auto st = eng.start(); !st) {
        std::fprintf(stderr, "troupe run: %s\n", st.message().c_str());
        return exit_failure;
    }

    run_outcome out;
    request_sink sink;
    sink.on_text = [](std::string_view delta) {
        std::fwrite(delta.data(), 1, delta.size(), stdout);
        std::fflush(stdout);
    };
    sink.on_done = [&out](finish_reason r, const usage& u, const timings& t) {
        std::lock_guard lock(out.mutex);
        out.reason = r;
        out.use = u;
        out.time = t;
        out.ended = true;
        out.cv.notify_all();
    };
    sink.on_error = [&out](const std::string& message) {
        std::lock_guard lock(out.mutex);
        out.error = message;
        out.ended = true;
        out.cv.notify_all();
    };
    if (!in.chat) {
        std::fputs(prompt.c_str(), stdout);
        std::fflush(stdout);
    }
    auto id = eng.submit(request{prompt, config.sampling, std::nullopt}, sink);
    if (!id) {
        std::fprintf(stderr, "\ntroupe run: %s\n", id.message().c_str());
        (void)eng.stop(std::chrono::milliseconds(0));
        return exit_failure;
    }
    {
        std::unique_lock lock(out.mutex);
        out.cv.wait(lock, [&] { return out.ended; });
    }
    std::fputs("\n", stdout);
    std::fflush(stdout);
    const engine_stats stats = eng.stats();
    (void)eng.stop(std::chrono::milliseconds(1000));
    if (!out.error.empty()) {
        std::fprintf(stderr, "troupe run: %s\n", out.error.c_str());
        return exit_failure;
    }
    std::fprintf(stderr,
                 "troupe run: %d prompt + %d generated tokens, finish %s; time to first token %.1f ms, "
                 "%.1f tokens/s; pipeline overhead per token (sampled -> delivered) median %.1f us, p99 %.1f us\n",
                 out.use.n_prompt_tokens, out.use.n_completion_tokens,
                 std::string(finish_reason_name(out.reason)).c_str(), out.time.time_to_first_token_ms,
                 out.time.decode_tokens_per_s, stats.token_overhead.median_us, stats.token_overhead.p99_us);
    if (out.use.n_draft_tokens > 0) {
        std::fprintf(stderr, "troupe run: speculative decoding: %d drafted, %d accepted (%.0f%%)\n",
                     out.use.n_draft_tokens, out.use.n_draft_accepted,
                     100.0 * out.use.n_draft_accepted / out.use.n_draft_tokens);
    }
    return exit_ok;
}

}  // namespace

const command_spec& run_spec() {
    static const command_spec spec = [] {
        command_spec s{
            .name = "run",
            .summary = "generate text from a prompt, streamed to stdout",
            .usage =
                "troupe run --model M.gguf --prompt TEXT [--chat [--system TEXT]] [sampling flags] [--config C.yaml] "
                "[--set KEY=VALUE]",
        };
        s.flags.push_back({"--prompt", "-p", "TEXT", "the prompt (backslash escapes like \\n work)"});
        s.flags.push_back({"--chat", "", "", "the prompt is a user message, rendered by the model's chat template"});
        s.flags.push_back({"--system", "", "TEXT", "with --chat: a system message before the user's"});
        s.flags.push_back({"--print-config", "", "", "print the effective config as YAML and exit"});
        for (auto& f : engine_flags()) s.flags.push_back(f);
        for (auto& f : sampling_flags()) s.flags.push_back(f);
        s.details = "Precedence: config/default.yaml values < --config file < $TROUPE_MODEL < flags < --set.";
        return s;
    }();
    return spec;
}

int run_command(const cli_args& args) {
    auto in = prepare_run(args);
    if (!in) {
        std::fprintf(stderr, "troupe run: %s\n", in.message().c_str());
        return exit_usage;
    }
    if (args.has("--print-config")) {
        std::fputs(to_yaml(in->config).c_str(), stdout);
        return exit_ok;
    }
    return generate(in->config, *in);
}

}  // namespace troupe::cli
