// http_server: the Beast front end — one listener, HTTP/1.1 sessions (OpenAI API with SSE, admin, static
// pages, /metrics, /health) and WebSocket sessions (/ws), on one I/O thread.
//
// Start-up order (so /health can answer 503 while the model loads):
//   http_server s(config);  s.listen();          // bound, serving /health (503) and the pages
//   ... load the model, build and start the engine ...
//   s.attach(model);                              // ready: /health 200, the API admits requests
// Shut-down: s.begin_drain() (new requests 503, engine.drain()), s.wait_idle(deadline), then stop the
// engine (which fails what is left) and s.stop().
//
// Every connection's work runs on the I/O thread; engine sinks post to it (request_stream.h). Beast and
// Asio stay inside the front end's files (http_front.h lists them): this header is plain C++.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/config/engine_config.h"
#include "core/result.h"
#include "server/serving.h"

namespace troupe::server {

class http_server {
public:
    // config.server says where to listen and the limits; config is also what the console shows.
    explicit http_server(engine_config config);
    ~http_server();
    http_server(const http_server&) = delete;
    http_server& operator=(const http_server&) = delete;

    // Binds host:port (port 0: any free one) and starts the I/O thread. The port actually bound.
    result<uint16_t> listen();
    uint16_t port() const;

    // The model is loaded and its engine started: start serving requests.
    void attach(serving_model model);

    // Stops admitting generation requests (503 / a WebSocket error) and drains the engine.
    void begin_drain();
    bool draining() const;
    // True when no server request is in flight, waiting at most until the deadline.
    bool wait_idle(std::chrono::steady_clock::time_point deadline) const;
    // Closes the listener and every connection and joins the I/O thread. Idempotent.
    void stop();

    const server_stats& stats() const;

    class impl;

private:
    std::unique_ptr<impl> impl_;
};

}  // namespace troupe::server
