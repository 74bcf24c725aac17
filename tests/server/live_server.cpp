#include "tests/server/live_server.h"

#include "actors/engine/engine_from_model.h"
#include "actors/engine/engine_params_from.h"
#include "core/config/config_loader.h"

namespace troupe::testing {

live_server::~live_server() {
    if (eng) (void)eng->stop(std::chrono::milliseconds(0));
    if (srv) srv->stop();
}

engine_config test_config(const std::string& model_path) {
    engine_config c;
    c.model = model_path;
    c.log_level = log_level::warn;
    c.server.port = 0;
    c.server.admin_token = "test-token";
    c.server.max_body_bytes = 64 * 1024;
    c.server.max_send_queue_bytes = 8192;
    c.server.drain_timeout_ms = 2000;
    return c;
}

std::unique_ptr<live_server> start_live_server(engine_config config, bool manual_lane, std::string& error) {
    set_log_level(config.log_level);
    auto s = std::make_unique<live_server>();
    s->config = config;
    s->srv = std::make_unique<server::http_server>(config);
    auto port = s->srv->listen();
    if (!port) {
        error = port.message();
        return nullptr;
    }
    s->port = *port;
    auto model = load_model(config);
    if (!model) {
        error = model.message();
        return nullptr;
    }
    s->model = std::move(*model);
    server::serving_model sm;
    sm.tok = s->model.tok;
    sm.n_ctx = s->model.runner->n_ctx();
    sm.facts.name = "stories260K";
    sm.facts.path = config.model;
    sm.facts.description = s->model.runner->description();
    sm.facts.device = "cpu";
    sm.facts.context_length = sm.n_ctx;
    sm.facts.plugins = s->model.plugins;
    sm.facts.config_yaml = to_yaml(config);
    server::set_chat_template(sm, s->model.file->string_or("tokenizer.chat_template", ""));
    // As troupe serve builds it: a spec plugin in the config drafts.
    engine_params params = engine_params_from(config);
    engine_parts parts = engine_parts_from(s->model, params);
    if (manual_lane) {
        s->manual = std::make_unique<lane>("manual");
        s->eng = std::make_unique<engine>(std::move(parts), params, *s->manual);
    } else {
        s->eng = std::make_unique<engine>(std::move(parts), params);
    }
    if (auto st = s->eng->start(); !st) {
        error = st.message();
        return nullptr;
    }
    sm.eng = s->eng.get();
    s->srv->attach(std::move(sm));
    return s;
}

}  // namespace troupe::testing
