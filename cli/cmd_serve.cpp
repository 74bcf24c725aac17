// troupe serve [--config C.yaml] [--model M.gguf] [--host H] [--port P]: the chat page, the OpenAI API,
// the admin console, /metrics and /health over HTTP and WebSocket (server/http_server.h).
//
// Order: the listener starts first (so /health answers 503 while the model loads), the URLs go to
// stdout, the model loads, the engine starts, the server is attached (/health 200). SIGTERM or SIGINT
// then drains: new requests are refused (503), running ones get server.drain_timeout_ms to finish, the
// rest are cancelled by the engine's stop, the server closes, and the process exits 0.
//
// Signals are blocked in every thread and taken with sigwait() on the main thread: no handler runs
// inside the server's or the engine's threads.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "actors/engine/engine.h"
#include "actors/engine/engine_from_model.h"
#include "actors/engine/engine_params_from.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/config/engine_config.h"
#include "core/loader/model_loader.h"
#include "server/http_server.h"

namespace troupe::cli {
namespace {

// A YAML double-quoted scalar: any key (quotes and backslashes too) reads back as given.
std::string yaml_quoted(std::string_view s) {
    std::string out = "\"";
    for (char ch : s) {
        if (ch == '"' || ch == '\\') out += '\\';
        out += ch;
    }
    return out + "\"";
}

result<engine_config> serve_config(const cli_args& args) {
    auto config = resolve_cli_config(args);
    if (!config) return config.err();
    std::vector<config_override> extra;
    if (auto h = args.value("--host")) extra.push_back({"server.host", "\"" + *h + "\"", "--host"});
    if (auto p = args.value("--port")) extra.push_back({"server.port", *p, "--port"});
    if (auto k = args.value("--api-key")) extra.push_back({"server.api_key", yaml_quoted(*k), "--api-key"});
    if (auto s = apply_overrides(*config, extra); !s) return s.err();
    return config;
}

// 128 bits from the system's random source, as 32 hex digits.
std::string random_token() {
    std::random_device rd;
    std::string t;
    for (int i = 0; i < 4; ++i) {
        char part[9];
        std::snprintf(part, sizeof part, "%08x", static_cast<unsigned>(rd()));
        t += part;
    }
    return t;
}

std::string served_name(const engine_config& config) {
    if (!config.server.served_model_name.empty()) return config.server.served_model_name;
    return std::filesystem::path(config.model).stem().string();
}

int serve(engine_config config) {
    set_log_level(config.log_level);
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts: they inherit it

    // The console needs a token; none configured: one for this run, printed in the console's URL (only the
    // person who started the server sees it).
    bool generated_token = false;
    if (!config.server.admin_console) {
        config.server.admin_token.clear();
    } else if (config.server.admin_token.empty()) {
        config.server.admin_token = random_token();
        generated_token = true;
    }
    server::http_server srv(config);
    auto port = srv.listen();
    if (!port) {
        std::fprintf(stderr, "troupe serve: %s\n", port.message().c_str());
        return exit_failure;
    }
    const std::string base = "http://" + config.server.host + ":" + std::to_string(*port);
    std::printf("troupe serve: listening on %s/\n  chat page      %s/\n  OpenAI API     %s/v1%s\n", base.c_str(),
                base.c_str(), base.c_str(),
                config.server.api_key.empty() ? "" : "   (API key: server.api_key, as Authorization: Bearer <key>)");
    if (config.server.admin_token.empty()) {
        std::printf("  admin console  disabled (server.admin_console: false)\n");
    } else if (generated_token) {
        std::printf("  admin console  %s/admin?token=%s   (token made for this run; server.admin_token fixes one)\n",
                    base.c_str(), config.server.admin_token.c_str());
    } else {
        std::printf("  admin console  %s/admin   (token: server.admin_token)\n", base.c_str());
    }
    std::printf("  metrics        %s/metrics\n  health         %s/health\nloading %s ...\n", base.c_str(), base.c_str(),
                config.model.c_str());
    std::fflush(stdout);

    // A spec plugin that cannot run is logged and left out: the server serves without speculation.
    auto model = load_model(config, load_options{.spec_optional = true, .kv_groups = true});
    if (!model) {
        std::fprintf(stderr, "troupe serve: %s\n", model.message().c_str());
        srv.stop();
        return exit_failure;
    }
    server::serving_model sm;
    sm.tok = model->tok;
    sm.n_ctx = model->runner->n_ctx();
    sm.facts.name = served_name(config);
    sm.facts.path = config.model;
    sm.facts.description = model->runner->description();
    sm.facts.device = std::string(device_name(model->device));
    sm.facts.context_length = sm.n_ctx;
    sm.facts.plugins = model->plugins;
    if (!model->spec_error.empty()) sm.facts.plugins.push_back("spec off: " + model->spec_error);
    engine_config shown = config;
    if (!shown.server.admin_token.empty()) shown.server.admin_token = "<redacted>";
    if (!shown.server.api_key.empty()) shown.server.api_key = "<redacted>";
    sm.facts.config_yaml = to_yaml(shown);
    server::set_chat_template(sm, model->file->string_or("tokenizer.chat_template", ""));

    engine_params params = engine_params_from(config);
    engine_parts parts = engine_parts_from(*model, params);
    engine eng(std::move(parts), params);
    if (auto st = eng.start(); !st) {
        std::fprintf(stderr, "troupe serve: %s\n", st.message().c_str());
        srv.stop();
        return exit_failure;
    }
    sm.eng = &eng;
    const std::string name = sm.facts.name;
    const std::string chat = sm.facts.chat_template;
    const int32_t n_ctx = sm.n_ctx;
    srv.attach(std::move(sm));
    std::printf("ready: model '%s' (context %d tokens), chat template %s\n", name.c_str(), n_ctx, chat.c_str());
    std::fflush(stdout);

    int sig = 0;
    sigwait(&signals, &sig);
    const auto timeout = std::chrono::milliseconds(config.server.drain_timeout_ms);
    std::printf("troupe serve: %s: draining (running requests get up to %lld ms)\n",
                sig == SIGTERM ? "SIGTERM" : "SIGINT", static_cast<long long>(timeout.count()));
    std::fflush(stdout);
    srv.begin_drain();
    const bool drained = srv.wait_idle(steady_clock::now() + timeout);
    auto st = eng.stop(drained ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(0));
    (void)srv.wait_idle(steady_clock::now() + std::chrono::seconds(2));  // let the last errors reach clients
    srv.stop();
    std::printf("troupe serve: stopped%s\n", st ? "" : (": " + st.message()).c_str());
    std::fflush(stdout);
    return exit_ok;
}

}  // namespace

const command_spec& serve_spec() {
    static const command_spec spec = [] {
        command_spec s{
            .name = "serve",
            .summary = "serve the chat page, the OpenAI API and the admin console over HTTP",
            .usage = "troupe serve [--config C.yaml] [--model M.gguf] [--host H] [--port P] [--set KEY=VALUE]",
        };
        s.flags.push_back({"--host", "", "ADDR", "address to listen on (server.host, default 127.0.0.1)"});
        s.flags.push_back({"--port", "", "PORT", "TCP port (server.port, default 8080; 0 = any free port)"});
        s.flags.push_back({"--api-key", "", "KEY",
                           "require this key on /v1, /tokenize, /detokenize, /ws and /metrics (server.api_key; "
                           "needed to listen beyond loopback)"});
        s.flags.push_back({"--print-config", "", "", "print the effective config as YAML and exit"});
        for (auto& f : engine_flags()) s.flags.push_back(f);
        for (auto& f : sampling_flags()) s.flags.push_back(f);
        s.details =
            "Routes: / (chat page), /ws (WebSocket chat), /v1/completions, /v1/chat/completions, /v1/models, "
            "/v1/models/{id}, /tokenize, /detokenize, "
            "/admin (console; its token is printed at start unless server.admin_token sets one), /metrics, /health. "
            "SIGTERM or SIGINT drains and exits 0.";
        return s;
    }();
    return spec;
}

int serve_command(const cli_args& args) {
    auto config = serve_config(args);
    if (!config) {
        std::fprintf(stderr, "troupe serve: %s\n", config.message().c_str());
        return exit_usage;
    }
    if (args.has("--print-config")) {
        std::fputs(to_yaml(*config).c_str(), stdout);
        return exit_ok;
    }
    auto model = resolve_model_path(*config);
    if (!model) {
        std::fprintf(stderr, "troupe serve: %s\n", model.message().c_str());
        return exit_usage;
    }
    config->model = *model;
    return serve(std::move(*config));
}

}  // namespace troupe::cli
