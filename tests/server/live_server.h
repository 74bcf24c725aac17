// live_server: the real stories260K model behind an engine and an http_server on 127.0.0.1 (ephemeral
// port), in this process, for the loopback tests. `manual` builds the engine on a caller-driven lane
// that nothing runs until the test polls it: requests then wait as long as the test wants (overload,
// cancel and disconnect tests need requests that are still in flight).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "actors/engine/engine.h"
#include "core/config/engine_config.h"
#include "core/loader/model_loader.h"
#include "core/runtime/lane.h"
#include "server/http_server.h"

namespace troupe::testing {

struct live_server {
    engine_config config;
    loaded_model model;  // tok and file stay; the runner moved into the engine
    std::unique_ptr<lane> manual;
    std::unique_ptr<engine> eng;
    std::unique_ptr<server::http_server> srv;
    uint16_t port = 0;

    ~live_server();
};

// The default test config: the model, server.port 0, admin token "test-token".
engine_config test_config(const std::string& model_path);

// Loads, starts and attaches; an error message on failure.
std::unique_ptr<live_server> start_live_server(engine_config config, bool manual_lane, std::string& error);

}  // namespace troupe::testing
