#include "server/request_stream.h"

namespace troupe::server {

request_stream::request_stream(params p) : params_(std::move(p)) {
    if (params_.stats) {
        params_.stats->n_queued.fetch_add(1);
        params_.stats->n_queued_tokens.fetch_add(params_.n_prompt_tokens);
        params_.stats->n_active.fetch_add(1);
    }
}

request_stream::~request_stream() {
    release_admission();
    if (params_.stats) params_.stats->n_active.fetch_sub(1);
}

void request_stream::set_notify(std::function<void()> notify) {
    std::lock_guard lock(mutex_);
    notify_ = std::move(notify);
}

void request_stream::set_on_overflow(std::function<void()> on_overflow) {
    std::lock_guard lock(mutex_);
    on_overflow_ = std::move(on_overflow);
}

void request_stream::release_admission() {
    std::lock_guard lock(mutex_);
    if (!admitted_) return;
    admitted_ = false;
    if (params_.stats) {
        params_.stats->n_queued.fetch_sub(1);
        params_.stats->n_queued_tokens.fetch_sub(params_.n_prompt_tokens);
    }
}

void request_stream::push(stream_event e, size_t bytes) {
    std::function<void()> notify;
    std::function<void()> overflow;
    const bool releases = e.what != stream_event::kind::logprobs;
    {
        std::lock_guard lock(mutex_);
        if (e.what == stream_event::kind::done || e.what == stream_event::kind::error) ++n_ended_;
        if (overflowed_) {
            // The client is gone or stuck: keep only the end, so memory stays bounded.
            if (e.what != stream_event::kind::done && e.what != stream_event::kind::error) return;
        }
        events_.push_back(std::move(e));
        pending_bytes_ += static_cast<int64_t>(bytes);
        if (!overflowed_ && pending_bytes_ > params_.max_pending_bytes) {
            overflowed_ = true;
            overflow = on_overflow_;
        }
        if (!notified_) {
            notified_ = true;
            notify = notify_;
        }
    }
    if (releases) release_admission();
    if (overflow) overflow();
    if (notify) notify();
}

void request_stream::push_logprobs(int32_t index, const token_logprobs& lp, bool prompt, bool has_logprob) {
    stream_event e;
    e.index = index;
    e.what = stream_event::kind::logprobs;
    e.logprob.token = lp.piece;
    e.logprob.logprob = lp.logprob;
    e.logprob.prompt = prompt;
    e.logprob.has_logprob = has_logprob;
    size_t n = lp.piece.size() + 64;
    for (const auto& [id, p] : lp.top) {
        std::string piece = params_.piece ? params_.piece(id) : std::to_string(id);
        n += piece.size() + 64;
        e.logprob.top.emplace_back(std::move(piece), p);
    }
    push(std::move(e), n);
}

request_sink request_stream::make_sink(int32_t index) {
    auto self = shared_from_this();
    request_sink sink;
    sink.on_text = [self, index](std::string_view delta) {
        stream_event e;
        e.index = index;
        e.what = stream_event::kind::text;
        e.text = std::string(delta);
        const size_t n = e.text.size() + 64;
        self->push(std::move(e), n);
    };
    sink.on_logprobs = [self, index](const token_logprobs& lp) { self->push_logprobs(index, lp, false, true); };
    sink.on_prompt_logprobs = [self, index](const std::vector<token_logprobs>& lps) {
        for (size_t i = 0; i < lps.size(); ++i) self->push_logprobs(index, lps[i], true, i > 0);
    };
    sink.on_done = [self, index](finish_reason r, const usage& u, const timings& t) {
        stream_event e;
        e.index = index;
        e.what = stream_event::kind::done;
        e.reason = r;
        e.use = u;
        e.time = t;
        self->push(std::move(e), 0);
    };
    sink.on_error = [self, index](const std::string& message) {
        stream_event e;
        e.index = index;
        e.what = stream_event::kind::error;
        e.text = message;
        self->push(std::move(e), 0);
    };
    return sink;
}

std::vector<stream_event> request_stream::take() {
    std::lock_guard lock(mutex_);
    std::vector<stream_event> out;
    out.swap(events_);
    pending_bytes_ = 0;
    notified_ = false;
    return out;
}

bool request_stream::pending() const {
    std::lock_guard lock(mutex_);
    return !events_.empty();
}

bool request_stream::ended() const {
    std::lock_guard lock(mutex_);
    return n_ended_ >= params_.n_sinks;
}

bool request_stream::overflowed() const {
    std::lock_guard lock(mutex_);
    return overflowed_;
}

}  // namespace troupe::server
