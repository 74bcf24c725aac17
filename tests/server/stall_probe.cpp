#include "tests/server/stall_probe.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "tests/common/shared_data.h"

namespace troupe::testing {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
namespace {

constexpr int k_io_timeout_ms = 30000;

bool connect_to(tcp::socket& s, uint16_t port) {
    beast::error_code ec;
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
    if (ec) return false;
    timeval tv{k_io_timeout_ms / 1000, 0};
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return true;
}

http::request<http::string_body> post_request(const std::string& body) {
    http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    return req;
}

std::string story_text() {
    if (auto path = shared_file("text/stories.txt")) {
        std::ifstream f(*path);
        std::stringstream ss;
        ss << f.rdbuf();
        if (!ss.str().empty()) return ss.str();
    }
    return "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.\n";
}

}  // namespace

std::string big_prompt_body(size_t n_bytes) {
    const std::string text = story_text();
    std::string prompt;
    prompt.reserve(n_bytes + text.size());
    while (prompt.size() < n_bytes) prompt += text;
    prompt.resize(n_bytes);
    boost::json::object o;
    o["prompt"] = prompt;
    o["max_tokens"] = 1;
    return boost::json::serialize(o);
}

// ---- http_poller ------------------------------------------------------------------------------------

http_poller::http_poller(uint16_t port, std::chrono::milliseconds interval, std::string target,
                         std::function<double(const std::string&)> read)
    : port_(port), interval_(interval), target_(std::move(target)), read_(std::move(read)), thread_([this] {
          run();
      }) {}

http_poller::~http_poller() {
    stop();
}

void http_poller::stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
}

std::vector<probe_sample> http_poller::samples() const {
    std::lock_guard lock(mutex_);
    return samples_;
}

void http_poller::run() {
    net::io_context ioc;
    while (!stop_.load()) {
        tcp::socket s(ioc);
        if (!connect_to(s, port_)) {
            std::this_thread::sleep_for(interval_);
            continue;
        }
        beast::flat_buffer buffer;
        while (!stop_.load()) {
            http::request<http::empty_body> req{http::verb::get, target_, 11};
            req.set(http::field::host, "127.0.0.1");
            probe_sample p;
            p.sent = stall_clock::now();
            beast::error_code ec;
            http::write(s, req, ec);
            http::response<http::string_body> res;
            if (!ec) http::read(s, buffer, res, ec);
            if (!ec) {
                p.answered = stall_clock::now();
                p.status = res.result_int();
                if (read_) p.value = read_(res.body());
            }
            {
                std::lock_guard lock(mutex_);
                samples_.push_back(p);
            }
            if (ec || !res.keep_alive()) break;
            std::this_thread::sleep_for(interval_);
        }
    }
}

// ---- stream_watch -----------------------------------------------------------------------------------

stream_watch::stream_watch(uint16_t port, std::string body)
    : port_(port), body_(std::move(body)), thread_([this] { run(); }) {}

stream_watch::~stream_watch() {
    stop();
}

void stream_watch::stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
}

std::vector<std::vector<stall_clock::time_point>> stream_watch::arrivals() const {
    std::lock_guard lock(mutex_);
    return arrivals_;
}

std::string stream_watch::error() const {
    std::lock_guard lock(mutex_);
    return error_;
}

void stream_watch::run() {
    net::io_context ioc;
    const auto req = post_request(body_);
    while (!stop_.load()) {
        tcp::socket s(ioc);
        beast::error_code ec;
        if (!connect_to(s, port_)) {
            std::lock_guard lock(mutex_);
            error_ = "stream: cannot connect";
            return;
        }
        http::write(s, req, ec);
        {
            std::lock_guard lock(mutex_);
            arrivals_.emplace_back();
        }
        std::string seen;
        char buf[16384];
        while (!stop_.load()) {
            const size_t n = s.read_some(net::buffer(buf), ec);
            if (ec) break;
            seen.append(buf, n);
            // The header comes first, with the first event or alone: only reads with event bytes count.
            const bool events = seen.find("data: ") != std::string::npos;
            if (events) {
                std::lock_guard lock(mutex_);
                arrivals_.back().push_back(stall_clock::now());
            }
            if (seen.find("data: [DONE]") != std::string::npos) break;
            // Keep only a tail long enough to find the markers across reads.
            if (events && seen.size() > 64) seen.erase(0, seen.size() - 64);
        }
        if (ec && !stop_.load()) {
            std::lock_guard lock(mutex_);
            error_ = "stream: " + ec.message();
            return;
        }
    }
}

// ---- big prompts ------------------------------------------------------------------------------------

std::vector<probe_sample> big_prompt_storm(uint16_t port, const std::string& body, int n, int timeout_ms) {
    std::vector<probe_sample> out(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
        threads.emplace_back([&, i] {
            net::io_context ioc;
            tcp::socket s(ioc);
            probe_sample& p = out[static_cast<size_t>(i)];
            if (!connect_to(s, port)) return;
            timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
            ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            const auto req = post_request(body);
            beast::error_code ec;
            http::write(s, req, ec);
            p.sent = stall_clock::now();
            if (ec) return;
            beast::flat_buffer buffer;
            http::response<http::string_body> res;
            http::read(s, buffer, res, ec);
            if (ec) return;
            p.answered = stall_clock::now();
            p.status = res.result_int();
        });
    }
    for (auto& t : threads) t.join();
    return out;
}

double prometheus_value(const std::string& body, const std::string& name) {
    const std::string line = "\n" + name + " ";
    const size_t at = ("\n" + body).find(line);
    if (at == std::string::npos) return -1;
    return std::atof(body.c_str() + at + name.size() + 1);
}

std::vector<thread_sched> threads_named(const std::string& prefix) {
    std::vector<thread_sched> out;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
        thread_sched t;
        t.tid = std::atol(entry.path().filename().c_str());
        std::ifstream comm(entry.path() / "comm");
        std::getline(comm, t.name);
        if (t.name.rfind(prefix, 0) != 0) continue;
        // stat: "tid (comm) state ..."; after the last ')' come fields 3 onwards: nice is field 19, policy 41.
        std::ifstream stat_file(entry.path() / "stat");
        std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
        std::istringstream fields(stat.substr(stat.rfind(')') + 1));
        std::vector<std::string> f((std::istream_iterator<std::string>(fields)), std::istream_iterator<std::string>());
        if (f.size() > 38) {
            t.nice = std::atoi(f[16].c_str());
            t.policy = std::atoi(f[38].c_str());
        }
        out.push_back(t);
    }
    return out;
}

double longest_gap_ms(const std::vector<std::vector<stall_clock::time_point>>& arrivals, stall_clock::time_point from,
                      stall_clock::time_point to) {
    double longest = 0;
    for (const auto& stream : arrivals) {
        for (size_t i = 1; i < stream.size(); ++i) {
            if (stream[i] < from || stream[i] > to) continue;
            longest = std::max(longest, std::chrono::duration<double, std::milli>(stream[i] - stream[i - 1]).count());
        }
    }
    return longest;
}

}  // namespace troupe::testing
