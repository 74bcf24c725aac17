// loopback_client: a small synchronous HTTP / WebSocket client for the server tests (Beast inside the
// .cpp only). Every call has a timeout; nothing here waits forever.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::testing {

struct http_reply {
    int status = 0;  // 0: no answer (error says why)
    std::string body;
    std::map<std::string, std::string> headers;  // lower-case names
    std::string error;
};

using header_list = std::vector<std::pair<std::string, std::string>>;

http_reply http_call(uint16_t port, std::string_view method, std::string_view target, std::string_view body = {},
                     const header_list& headers = {}, int timeout_ms = 30000);

// Sends raw bytes and returns whatever comes back before the server closes or timeout_ms passes.
std::string raw_exchange(uint16_t port, std::string_view data, int timeout_ms);

// Sends a POST and closes the connection once n_bytes of the answer arrived (or after timeout_ms).
// Returns the bytes read before hanging up.
std::string post_then_hang_up(uint16_t port, std::string_view target, std::string_view body, size_t n_bytes,
                              int timeout_ms);

// A raw TCP connection for requests a normal client would not send (Expect, HTTP/1.0, huge bodies).
class raw_connection {
public:
    raw_connection();
    ~raw_connection();
    bool connect(uint16_t port, int timeout_ms = 5000);
    // Writes everything; false on an error (the server may have closed or reset: error() says which).
    bool write(std::string_view bytes);
    // Reads until `until` appears in what was read so far, the server closes, or timeout_ms passes;
    // returns everything read so far.
    std::string read_until(std::string_view until, int timeout_ms);
    // Reads until the server closes (or timeout_ms); everything read so far.
    std::string read_to_close(int timeout_ms);
    bool closed_by_server() const;
    const std::string& error() const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

// What a WebSocket handshake got: 101 and the chosen subprotocol, or the refusal's status and body.
struct ws_handshake {
    int status = 0;  // 0: no answer
    std::string protocol;
    std::string body;
    std::string error;
};

// A blocking WebSocket client to /ws.
class ws_client {
public:
    ws_client();
    ~ws_client();
    bool connect(uint16_t port, int timeout_ms = 5000);
    // Connects to `target` ("/ws?api_key=k") with extra handshake headers (Host, Origin,
    // Sec-WebSocket-Protocol, Authorization); status 101 on success.
    ws_handshake connect_with(uint16_t port, std::string_view target, const header_list& headers,
                              int timeout_ms = 5000);
    bool send(std::string_view text);
    // The next text message, or nullopt on timeout / close.
    std::optional<std::string> read(int timeout_ms = 30000);
    void close();
    // Shrinks the receive buffer (before connect) so that a client that never reads stalls the server soon.
    void set_small_receive_buffer();

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace troupe::testing
