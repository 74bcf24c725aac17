#include "actors/tokenizer/tokenizer_actor.h"

#include "actors/common/overloaded.h"

namespace troupe {

tokenizer_actor::tokenizer_actor(lane& home, std::shared_ptr<const text_codec> codec, int32_t capacity)
    : core_(std::move(codec)),
      inbox_(
          home, "tokenizer", capacity, [this](tokenizer_msg& m) { handle(m); },
          [this](const tokenizer_msg& m, const std::string& what) { on_failure(m, what); }) {}

void tokenizer_actor::connect(mailbox<scheduler_msg>& scheduler, mailbox<streamer_msg>& streamer) {
    scheduler_ = &scheduler;
    streamer_ = &streamer;
}

void tokenizer_actor::handle(tokenizer_msg& m) {
    std::visit(overloaded{
                   [&](submit_request& r) { submit(r); },
                   [&](cancel_request& c) { scheduler_->post(c); },
                   [&](abort_all& a) { scheduler_->post(a); },
               },
               m);
}

void tokenizer_actor::open(const submit_request& r, int32_t n_prompt) {
    open_stream o;
    o.id = r.id;
    o.sink = r.sink;
    if (!r.params->stop_strings.empty())
        o.stop_strings = std::make_shared<const std::vector<std::string>>(r.params->stop_strings);
    if (!r.params->shown_special_tokens.empty())
        o.shown_specials = std::make_shared<const std::vector<std::string>>(r.params->shown_special_tokens);
    o.n_prompt_tokens = n_prompt;
    o.t_submit = r.t_submit;
    streamer_->post(std::move(o));
    opened_ = r.id;
}

void tokenizer_actor::submit(const submit_request& r) {
    auto ids = core_.prepare(r);
    if (!ids.ok()) {
        open(r, 0);
        streamer_->post(fail_stream{r.id, ids.message()});
        return;
    }
    const auto n_prompt = static_cast<int32_t>(ids->size());
    open(r, n_prompt);
    enqueue_request e;
    e.id = r.id;
    e.prompt = std::make_shared<const std::vector<int32_t>>(std::move(ids).value());
    e.params = r.params;
    e.t_submit = r.t_submit;
    e.logprobs = r.logprobs;
    e.prompt_logprobs = r.prompt_logprobs;
    e.n_forks = r.n_forks;
    e.fork_of = r.fork_of;
    if (e.fork_of != 0) {
        // A choice that forks from an earlier one always reaches the scheduler, where that one waits for it (and it
        // adds no prompt to compute).
        scheduler_->post(std::move(e));
    } else if (!scheduler_->try_post(std::move(e))) {
        streamer_->post(fail_stream{r.id, "overloaded: the scheduler's mailbox is full (" +
                                              std::to_string(scheduler_->stats().capacity) + " requests)"});
    }
}

void tokenizer_actor::on_failure(const tokenizer_msg& m, const std::string& what) {
    if (const auto* r = std::get_if<submit_request>(&m)) {
        if (opened_ != r->id) open(*r, 0);
        streamer_->post(fail_stream{r->id, "tokenizer: " + what});
    }
}

}  // namespace troupe
