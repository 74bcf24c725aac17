// prep_pool: where the front end parses request bodies, renders chat templates and tokenizes prompts, off
// the I/O thread (http_front.h). A 1 MB prompt is about a second of tokenization on one core here; /health,
// the pages and the running streams must not wait for it.
//
// Two threads: a huge prompt does not hold up every small one behind it, and the executor's threads keep
// most of the cores. Ten nice levels below the server: tokenizing is batch work, so where cores are short the I/O
// thread and the engine's lanes (the running streams) go first; a new request's preparation still gets a share (about a
// tenth of a core against one busy thread at nice 0), so its first token does not starve behind a busy
// engine. The threads are named troupe-prep (top -H, /proc/<pid>/task/*/comm). /metrics counts the requests
// waiting for or in the pool (troupe_requests_preparing).
//
// Measured on the shared 2-core box (bench_server_stall): the stream's longest gap while ten 1 MB prompts
// arrive follows the other processes' load; one bulk thread at SCHED_IDLE for large bodies did not shorten it
// and made the ten prompts take 2-4x longer, so the pool stays as it is.
#pragma once

#include <boost/asio.hpp>

#include <type_traits>

#include "server/server_stats.h"

namespace troupe::server {

// Names the calling thread troupe-prep and lowers its priority ten nice levels below the caller's (SCHED_IDLE where
// that would pass 19), once per thread (Linux: the nice value is per thread).
void enter_prep_thread();

class prep_pool {
public:
    explicit prep_pool(server_stats& stats) : stats_(stats) {}

    // Runs f on the pool and resumes the calling coroutine (on its own executor) with f's value. f must not
    // touch what the I/O thread changes.
    template <class F>
    boost::asio::awaitable<std::invoke_result_t<F&>> run(F f) {
        namespace net = boost::asio;
        using value = std::invoke_result_t<F&>;
        auto task = [f = std::move(f)]() mutable -> net::awaitable<value> {
            enter_prep_thread();
            co_return f();
        };
        stats_.n_preparing.fetch_add(1);
        net::awaitable<value> done = net::co_spawn(pool_, std::move(task), net::use_awaitable);
        value v = co_await std::move(done);
        stats_.n_preparing.fetch_sub(1);
        co_return v;
    }

    // Waits for the tasks in flight and joins the threads. Idempotent.
    void join() { pool_.join(); }

private:
    server_stats& stats_;
    boost::asio::thread_pool pool_{2};
};

}  // namespace troupe::server
