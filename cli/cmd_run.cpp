// troupe run --model M.gguf --prompt "..." [sampling flags] [--config C.yaml]: generate and stream the text
// to stdout.
//
// Structure: run_spec() declares the flags; prepare_run() turns them into a validated run_inputs (the
// effective config and the prompt), with every problem reported at once; run_command() then drives the
// engine: the model loads as the config says, the request flows through the five actors, and each text
// delta is written to stdout as it arrives. The summary (tokens, speed, pipeline overhead) goes to stderr.
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>

#include "actors/engine/engine.h"
#include "actors/engine/engine_from_model.h"
#include "actors/engine/engine_params_from.h"
#include "core/loader/model_loader.h"

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/config/engine_config.h"

namespace troupe::cli {
namespace {

struct run_inputs {
    engine_config config;  // defaults < --config < $TROUPE_MODEL < flags; config.sampling is the request's
    std::string prompt;    // backslash escapes already applied
};

// Exit code on failure; the message is printed here.
result<run_inputs> prepare_run(const cli_args& args) {
    auto config = resolve_cli_config(args);
    if (!config) return config.err();
    run_inputs in{std::move(*config), unescape(args.value_or("--prompt", ""))};
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

int generate(const engine_config& config, const std::string& prompt) {
    set_log_level(config.log_level);
    auto model = load_model(config);
    if (!model) {
        std::fprintf(stderr, "troupe run: %s\n", model.message().c_str());
        return exit_failure;
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
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
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
            .usage = "troupe run --model M.gguf --prompt TEXT [sampling flags] [--config C.yaml] [--set KEY=VALUE]",
        };
        s.flags.push_back({"--prompt", "-p", "TEXT", "the prompt (backslash escapes like \\n work)"});
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
    return generate(in->config, in->prompt);
}

}  // namespace troupe::cli
