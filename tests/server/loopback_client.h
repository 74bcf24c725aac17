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

// A blocking WebSocket client to /ws.
class ws_client {
public:
    ws_client();
    ~ws_client();
    bool connect(uint16_t port, int timeout_ms = 5000);
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
