#include "actors/streamer/streamer_actor.h"

#include "actors/common/overloaded.h"

namespace troupe {

streamer_actor::streamer_actor(lane& home, std::shared_ptr<const text_codec> codec, latency_histogram* overhead,
                               streamer_core::end_fn on_end, int32_t capacity)
    : core_(std::move(codec), overhead, std::move(on_end)),
      inbox_(
          home, "streamer", capacity, [this](streamer_msg& m) { handle(m); },
          [this](const streamer_msg& m, const std::string& what) { on_failure(m, what); }) {}

void streamer_actor::connect(mailbox<scheduler_msg>& scheduler) {
    scheduler_ = &scheduler;
}

void streamer_actor::handle(streamer_msg& m) {
    std::visit(overloaded{
                   [&](open_stream& o) { core_.open(o); },
                   [&](deliver_tokens& d) {
                       stopped_.clear();
                       core_.deliver(d, stopped_);
                       for (request_id id : stopped_) scheduler_->post(finish_request{id, finish_reason::stop});
                   },
                   [&](fail_stream& f) { core_.fail(f.id, f.message); },
                   [&](close_all& c) { core_.close_all(c.reason); },
               },
               m);
}

void streamer_actor::on_failure(const streamer_msg& m, const std::string& what) {
    const std::string message = "streamer: " + what;
    std::visit(overloaded{
                   [&](const open_stream& o) {
                       if (core_.is_open(o.id)) {
                           core_.fail(o.id, message);
                       } else {
                           core_.reject(o, message);
                       }
                       scheduler_->post(finish_request{o.id, finish_reason::stop});
                   },
                   [&](const deliver_tokens& d) {
                       for (request_id id : stopped_) scheduler_->post(finish_request{id, finish_reason::stop});
                       for (const auto& e : d.entries) {
                           if (!core_.is_open(e.id)) continue;
                           core_.fail(e.id, message);
                           if (!e.finish) scheduler_->post(finish_request{e.id, finish_reason::stop});
                       }
                   },
                   [&](const fail_stream&) {},
                   [&](const close_all&) {},
               },
               m);
}

}  // namespace troupe
