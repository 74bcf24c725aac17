// `troupe serve` as a child process: it prints its URLs, serves, and on SIGTERM drains — a request
// running at that moment completes (or is cancelled) within the drain timeout — and exits 0.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "tests/common/shared_data.h"
#include "tests/server/loopback_client.h"

namespace troupe::testing {
namespace {
using namespace std::chrono_literals;

struct child {
    pid_t pid = -1;
    int out_fd = -1;
    std::string output;

    // Reads stdout until `needle` appears or the time runs out.
    bool read_until(const std::string& needle, std::chrono::milliseconds limit) {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (output.find(needle) == std::string::npos) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return false;
            pollfd p{out_fd, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
            char buf[4096];
            const ssize_t n = ::read(out_fd, buf, sizeof buf);
            if (n <= 0) return false;
            output.append(buf, static_cast<size_t>(n));
        }
        return true;
    }

    // Waits for the exit; -1 when it did not exit in time (then it is killed).
    int wait_exit(std::chrono::milliseconds limit) {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        int status = 0;
        while (std::chrono::steady_clock::now() < deadline) {
            if (::waitpid(pid, &status, WNOHANG) == pid)
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            std::this_thread::sleep_for(20ms);
        }
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        return -1;
    }
};

child spawn(const std::vector<std::string>& args) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    child c;
    c.pid = ::fork();
    if (c.pid == 0) {
        ::dup2(fds[1], STDOUT_FILENO);
        ::close(fds[0]);
        ::close(fds[1]);
        std::vector<char*> argv;
        for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    ::close(fds[1]);
    c.out_fd = fds[0];
    return c;
}

TEST(troupe_serve, sigterm_drains_the_running_request_and_exits_0) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    child c = spawn({TROUPE_BINARY, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0", "--set",
                     "server.drain_timeout_ms=5000", "--set", "server.admin_token=t0k", "--log-level", "warn"});
    ASSERT_TRUE(c.read_until("ready:", 30000ms)) << c.output;
    const auto at = c.output.find("http://127.0.0.1:");
    ASSERT_NE(at, std::string::npos) << c.output;
    const int port = std::stoi(c.output.substr(at + 17));
    EXPECT_NE(c.output.find("/admin"), std::string::npos);
    EXPECT_EQ(http_call(static_cast<uint16_t>(port), "GET", "/health").status, 200);

    http_reply running;
    std::atomic<bool> finished{false};
    std::thread client([&] {
        running = http_call(
            static_cast<uint16_t>(port), "POST", "/v1/completions",
            R"({"prompt":"Once upon a time","max_tokens":1500,"ignore_eos":true,"temperature":0,"stream":true})", {},
            20000);
        finished = true;
    });
    // SIGTERM once the request is in flight (the admin state counts it), or after it finished already.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!finished.load() && std::chrono::steady_clock::now() < deadline) {
        auto state = http_call(static_cast<uint16_t>(port), "GET", "/admin/api/state?token=t0k", {}, {}, 2000);
        if (state.body.find("\"active_requests\":0") == std::string::npos && state.status == 200) break;
        std::this_thread::sleep_for(1ms);
    }
    ASSERT_EQ(::kill(c.pid, SIGTERM), 0);
    const int code = c.wait_exit(15000ms);
    client.join();
    EXPECT_EQ(code, 0) << c.output;
    // The request either completed (finish_reason and [DONE]) or ended with the drain's error, never hung.
    EXPECT_EQ(running.status, 200) << running.error;
    EXPECT_NE(running.body.find("data: [DONE]"), std::string::npos) << running.body.substr(0, 300);
    c.read_until("stopped", 2000ms);
    EXPECT_NE(c.output.find("draining"), std::string::npos) << c.output;
    ::close(c.out_fd);
}

// With no server.admin_token, troupe serve makes one per start and prints the console's URL with it; the token
// opens the admin API. server.admin_console: false leaves the console off.
TEST(troupe_serve, prints_a_console_url_with_a_token_made_for_the_run_unless_the_console_is_off) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    for (const bool console : {true, false}) {
        child c = spawn({TROUPE_BINARY, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0", "--set",
                         std::string("server.admin_console=") + (console ? "true" : "false"), "--log-level", "warn"});
        ASSERT_TRUE(c.read_until("ready:", 30000ms)) << c.output;
        const auto at = c.output.find("http://127.0.0.1:");
        ASSERT_NE(at, std::string::npos) << c.output;
        const auto port = static_cast<uint16_t>(std::stoi(c.output.substr(at + 17)));
        const auto token_at = c.output.find("/admin?token=");
        if (console) {
            ASSERT_NE(token_at, std::string::npos) << c.output;
            const std::string token = c.output.substr(token_at + 13, 32);
            EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
            EXPECT_EQ(http_call(port, "GET", "/admin/api/state?token=" + token, {}, {}, 5000).status, 200);
            EXPECT_EQ(http_call(port, "GET", "/admin/api/state?token=wrong", {}, {}, 5000).status, 401);
        } else {
            EXPECT_EQ(token_at, std::string::npos) << c.output;
            EXPECT_NE(c.output.find("admin console  disabled"), std::string::npos) << c.output;
            EXPECT_EQ(http_call(port, "GET", "/admin/api/state?token=x", {}, {}, 5000).status, 403);
        }
        ASSERT_EQ(::kill(c.pid, SIGTERM), 0);
        EXPECT_EQ(c.wait_exit(15000ms), 0) << c.output;
        ::close(c.out_fd);
    }
}

}  // namespace
}  // namespace troupe::testing
