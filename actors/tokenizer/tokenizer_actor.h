// tokenizer_actor: the pipeline's entry. For each submission it opens the client's stream at the
// streamer (which from then on owns the sink), then sends the prompt ids to the scheduler. Cancels
// and aborts are forwarded, so they arrive behind the submissions they refer to.
#pragma once

#include <memory>

#include "actors/scheduler/scheduler_msgs.h"
#include "actors/streamer/streamer_msgs.h"
#include "actors/tokenizer/tokenizer_core.h"
#include "actors/tokenizer/tokenizer_msgs.h"
#include "core/runtime/mailbox.h"

namespace troupe {

class tokenizer_actor {
public:
    tokenizer_actor(lane& home, std::shared_ptr<const text_codec> codec, int32_t capacity);
    void connect(mailbox<scheduler_msg>& scheduler, mailbox<streamer_msg>& streamer);

    mailbox<tokenizer_msg>& inbox() { return inbox_; }

private:
    void handle(tokenizer_msg& m);
    void on_failure(const tokenizer_msg& m, const std::string& what);
    void submit(const submit_request& r);
    void open(const submit_request& r, int32_t n_prompt);

    tokenizer_core core_;
    mailbox<scheduler_msg>* scheduler_ = nullptr;
    mailbox<streamer_msg>* streamer_ = nullptr;
    request_id opened_ = -1;  // the last request whose stream was opened
    mailbox<tokenizer_msg> inbox_;
};

}  // namespace troupe
