// request_stream: the hand-over between an engine request's sink (called on the engine's control lane,
// must not block) and the connection that serves it (on the server's I/O thread).
//
//   engine lane:  sink.on_text / on_logprobs / on_done / on_error ─► push event (mutex) ─► notify() once
//   I/O thread:   notify handler ─► take() all events ─► write them to the client
//
// notify is called at most once until the I/O side calls take() again, so a fast stream posts one
// wake-up per batch of tokens, not one per token. So the I/O side must check pending() before it waits
// (a wake-up that came while it was busy writing is not repeated). Unsent bytes are bounded: past max_pending_bytes the
// stream is marked overflowed and on_overflow runs once (the server cancels the request and closes the
// connection of a client that does not read). Queue admission (server_stats.n_queued / n_queued_tokens)
// is released at the first text or at the end, whichever comes first, even when no connection is left.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/common/request_types.h"
#include "server/response_builder.h"
#include "server/server_stats.h"

namespace troupe::server {

struct stream_event {
    enum class kind { text, logprobs, done, error };
    kind what = kind::text;
    int32_t index = 0;  // the sink it came from (a request with several choices has one sink per choice)
    std::string text;   // text: the delta; error: the message
    token_logprob logprob;
    finish_reason reason = finish_reason::stop;
    usage use;
    timings time;
};

class request_stream : public std::enable_shared_from_this<request_stream> {
public:
    struct params {
        int64_t max_pending_bytes = 4 << 20;
        int32_t n_prompt_tokens = 0;                // held in server_stats.n_queued_tokens until the first text
        server_stats* stats = nullptr;              // may be null (tests)
        std::function<std::string(int32_t)> piece;  // token id -> its text, for logprob alternatives
        int32_t n_sinks = 1;                        // engine requests feeding it: ended once each has ended
    };
    explicit request_stream(params p);
    ~request_stream();

    // Set by the connection before submit.
    void set_notify(std::function<void()> notify);
    void set_on_overflow(std::function<void()> on_overflow);

    // The engine sink that feeds this stream (holds a shared_ptr to it); its events carry `index`.
    request_sink make_sink(int32_t index = 0);

    // Everything pushed since the last take(); re-arms notify.
    std::vector<stream_event> take();
    bool pending() const;     // events wait to be taken
    bool ended() const;       // done or error was pushed by every sink
    bool overflowed() const;  // pending bytes passed the bound

    // Releases queue admission now (submit failed, or the request never started).
    void release_admission();

private:
    void push(stream_event e, size_t bytes);
    // A logprobs event for one token: a prompt token's (echo) or a generated one's; without a logprob, JSON null.
    void push_logprobs(int32_t index, const token_logprobs& lp, bool prompt, bool has_logprob);

    params params_;
    mutable std::mutex mutex_;
    std::vector<stream_event> events_;
    int64_t pending_bytes_ = 0;
    bool notified_ = false;
    int32_t n_ended_ = 0;  // sinks that pushed done or error
    bool overflowed_ = false;
    bool admitted_ = true;  // still counted in the queue
    std::function<void()> notify_;
    std::function<void()> on_overflow_;
};

}  // namespace troupe::server
