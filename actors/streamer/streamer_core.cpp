#include "actors/streamer/streamer_core.h"

#include <algorithm>

#include "core/result.h"

namespace troupe {

streamer_core::streamer_core(std::shared_ptr<const text_codec> codec, latency_histogram* overhead, end_fn on_end)
    : codec_(std::move(codec)), overhead_(overhead), on_end_(std::move(on_end)) {
    TROUPE_ASSERT(codec_ != nullptr, "streamer needs a codec");
}

void streamer_core::open(const open_stream& m) {
    TROUPE_ASSERT(!streams_.contains(m.id), "stream " + std::to_string(m.id) + " opened twice");
    stream_state s;
    s.sink = m.sink;
    s.decoder = m.shown_specials ? codec_->make_decoder_showing(*m.shown_specials) : codec_->make_decoder();
    s.stop_strings = m.stop_strings;
    s.use.n_prompt_tokens = m.n_prompt_tokens;
    s.t_submit = m.t_submit;
    s.t_admitted = m.t_submit;
    streams_.emplace(m.id, std::move(s));
}

size_t streamer_core::find_stop(const std::vector<std::string>& stops, const std::string& text) {
    size_t best = std::string::npos;
    for (const auto& stop : stops) {
        if (stop.empty()) continue;
        best = std::min(best, text.find(stop));
    }
    return best;
}

size_t streamer_core::holdback(const std::vector<std::string>& stops, const std::string& text) {
    size_t best = 0;
    for (const auto& stop : stops) {
        size_t max_len = std::min(stop.size() - (stop.empty() ? 0 : 1), text.size());
        for (size_t len = max_len; len > best; --len) {
            if (text.compare(text.size() - len, len, stop, 0, len) == 0) {
                best = len;
                break;
            }
        }
    }
    return best;
}

void streamer_core::deliver(const deliver_tokens& m, std::vector<request_id>& stopped) {
    for (const token_delivery& e : m.entries) {
        auto it = streams_.find(e.id);
        if (it == streams_.end()) continue;  // already ended here (stop string) or failed
        stream_state& s = it->second;
        s.t_admitted = e.t_admitted;
        s.use.n_completion_tokens += e.n_counted;
        s.use.n_draft_tokens += e.n_drafted;
        s.use.n_draft_accepted += e.n_accepted;

        if (s.sink->on_prompt_logprobs && !e.prompt_logprobs.empty()) s.sink->on_prompt_logprobs(e.prompt_logprobs);
        if (s.sink->on_logprobs) {
            for (const token_logprobs& lp : e.logprobs) s.sink->on_logprobs(lp);
        }
        std::string text = std::move(s.held);
        s.held.clear();
        for (int32_t t : e.tokens) text += s.decoder->push(t);
        if (e.finish) text += s.decoder->flush();

        bool stop_hit = false;
        if (s.stop_strings && !s.stop_strings->empty()) {
            size_t at = find_stop(*s.stop_strings, text);
            if (at != std::string::npos) {
                text.resize(at);
                stop_hit = true;
            } else if (!e.finish) {
                size_t keep = holdback(*s.stop_strings, text);
                s.held = text.substr(text.size() - keep);
                text.resize(text.size() - keep);
            }
        }

        const time_point now = steady_clock::now();
        if (overhead_ != nullptr) {
            const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - e.t_sampled).count();
            for (size_t i = 0; i < e.tokens.size(); ++i) overhead_->record(ns);
        }
        if (e.n_counted > 0 && !s.got_first) {
            s.got_first = true;
            s.t_first = now;
        }
        if (!text.empty() && s.sink->on_text) s.sink->on_text(text);

        if (stop_hit) {
            if (!e.finish) stopped.push_back(e.id);
            finish(e.id, s, finish_reason::stop, now);
        } else if (e.finish) {
            finish(e.id, s, *e.finish, now);
        }
    }
}

void streamer_core::finish(request_id id, stream_state& s, finish_reason reason, time_point now) {
    timings t;
    t.queue_ms = ms_between(s.t_submit, s.t_admitted);
    t.total_ms = ms_between(s.t_submit, now);
    if (s.got_first) {
        t.time_to_first_token_ms = ms_between(s.t_submit, s.t_first);
        const double decode_s = ms_between(s.t_first, now) / 1e3;
        if (s.use.n_completion_tokens > 1 && decode_s > 0)
            t.decode_tokens_per_s = (s.use.n_completion_tokens - 1) / decode_s;
    }
    auto sink = s.sink;  // the stream goes before the callback runs: a throwing sink cannot end it twice
    usage use = s.use;
    streams_.erase(id);
    if (on_timing_ && reason != finish_reason::cancelled) on_timing_(use, t);
    if (on_end_) on_end_(id, reason == finish_reason::cancelled ? request_outcome::cancelled : request_outcome::done);
    if (sink->on_done) sink->on_done(reason, use, t);
}

void streamer_core::fail(request_id id, const std::string& message) {
    auto it = streams_.find(id);
    if (it == streams_.end()) return;
    auto sink = it->second.sink;
    streams_.erase(it);
    if (on_end_) on_end_(id, request_outcome::failed);
    if (sink->on_error) sink->on_error(message);
}

void streamer_core::reject(const open_stream& m, const std::string& message) {
    if (on_end_) on_end_(m.id, request_outcome::failed);
    if (m.sink && m.sink->on_error) m.sink->on_error(message);
}

void streamer_core::close_all(const std::string& reason) {
    std::vector<request_id> ids;
    for (const auto& [id, s] : streams_) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    for (request_id id : ids) fail(id, reason);
}

}  // namespace troupe
