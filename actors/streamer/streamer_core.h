// streamer_core: turns sampled tokens into text for the client (the streamer actor's pure core).
//
// Per request: an incremental decoder, the stop strings, and the text held back. After each delivery
// the text so far (held + new) is searched for the earliest stop string: if found, the text before
// it is sent and the request ends with finish stop (the scheduler must then be told). Otherwise the
// longest suffix that could still become a stop string is held back and the rest is sent, so a stop
// string split across tokens is never partly shown. On the request's last delivery the decoder is
// flushed and everything left is sent.
//
// Overhead measurement: for every sampled token, (time it was processed here, just before the sink
// is called) - (time the executor sampled it) goes into the overhead histogram.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/streamer/streamer_msgs.h"
#include "actors/tokenizer/text_codec.h"
#include "core/runtime/latency_histogram.h"

namespace troupe {

class streamer_core {
public:
    // on_end is told once per opened request when it ends (the engine counts in-flight requests).
    using end_fn = std::function<void(request_id, request_outcome)>;
    // Told the usage and timings of every request that finishes (not failed ones): the engine's window.
    using timing_fn = std::function<void(const usage&, const timings&)>;

    streamer_core(std::shared_ptr<const text_codec> codec, latency_histogram* overhead, end_fn on_end);

    void open(const open_stream& m);
    // Appends to stopped the requests a stop string ended here (not those the scheduler ended).
    void deliver(const deliver_tokens& m, std::vector<request_id>& stopped);
    void fail(request_id id, const std::string& message);
    // A stream that could not be opened: its sink hears the error directly.
    void reject(const open_stream& m, const std::string& message);
    void close_all(const std::string& reason);
    void set_timing_fn(timing_fn fn) { on_timing_ = std::move(fn); }

    size_t n_open() const { return streams_.size(); }
    bool is_open(request_id id) const { return streams_.contains(id); }

private:
    struct stream_state {
        std::shared_ptr<const request_sink> sink;
        std::unique_ptr<text_decoder> decoder;
        std::shared_ptr<const std::vector<std::string>> stop_strings;
        std::string held;  // text not yet sent: it may be the start of a stop string
        usage use;
        time_point t_submit;
        time_point t_admitted;
        time_point t_first;
        bool got_first = false;
    };

    // Position of the earliest stop string in text, or npos.
    static size_t find_stop(const std::vector<std::string>& stops, const std::string& text);
    // Length of the longest suffix of text that is a proper prefix of some stop string.
    static size_t holdback(const std::vector<std::string>& stops, const std::string& text);
    void finish(request_id id, stream_state& s, finish_reason reason, time_point now);

    std::shared_ptr<const text_codec> codec_;
    latency_histogram* overhead_;
    end_fn on_end_;
    timing_fn on_timing_;
    std::unordered_map<request_id, stream_state> streams_;
};

}  // namespace troupe
