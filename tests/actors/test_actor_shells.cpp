// The actor shells alone, wired to stand-in mailboxes on lanes the test drives (or never runs, to
// play a peer that has fallen behind): the overload paths between actors.
#include <gtest/gtest.h>

#include "actors/common/overloaded.h"
#include "actors/kv_allocator/kv_allocator_actor.h"
#include "actors/scheduler/scheduler_actor.h"
#include "actors/tokenizer/tokenizer_actor.h"
#include "tests/actors/fakes.h"

namespace troupe {
namespace {

// A stand-in peer: records the names of the messages it gets (when its lane runs).
template <class Msg>
struct peer {
    peer(lane& l, const char* name, int32_t capacity)
        : box(
              l, name, capacity,
              [this](Msg& m) {
                  got.push_back(std::visit([](const auto& x) { return std::string(x.name); }, m));
                  messages.push_back(m);
              },
              [](const Msg&, const std::string&) {}) {}
    std::vector<std::string> got;
    std::vector<Msg> messages;
    mailbox<Msg> box;
};

TEST(tokenizer_actor, a_full_scheduler_mailbox_fails_the_request_as_overloaded) {
    lane home("tokenizer"), stalled("stalled"), streamer_lane("streamer");
    peer<scheduler_msg> scheduler(stalled, "scheduler", 1);
    peer<streamer_msg> streamer(streamer_lane, "streamer", 8);
    tokenizer_actor tok(home, std::make_shared<testing::fake_codec>(), 8);
    tok.connect(scheduler.box, streamer.box);
    for (request_id id : {1, 2}) {
        submit_request r;
        r.id = id;
        r.prompt = "ab";
        r.params = std::make_shared<const sampling_params>();
        ASSERT_TRUE(tok.inbox().try_post(r));
    }
    home.run_until_idle();
    streamer_lane.run_until_idle();
    EXPECT_EQ(streamer.got, (std::vector<std::string>{"open_stream", "open_stream", "fail_stream"}));
    const auto& fail = std::get<fail_stream>(streamer.messages[2]);
    EXPECT_EQ(fail.id, 2);
    EXPECT_EQ(fail.message, "overloaded: the scheduler's mailbox is full (1 requests)");
    EXPECT_EQ(std::get<open_stream>(streamer.messages[0]).n_prompt_tokens, 3);
    EXPECT_EQ(scheduler.box.stats().n_rejected, 1);
}

TEST(scheduler_actor, a_streamer_that_falls_behind_fails_the_request_as_overloaded_and_frees_it) {
    lane home("scheduler"), peers("peers"), stalled("stalled");
    peer<executor_msg> executor(peers, "executor", 1);
    peer<streamer_msg> streamer(stalled, "streamer", 2);  // never runs: its client stopped reading
    scheduler_params config;
    config.n_ctx = 64;
    config.eog_ids = {testing::k_fake_eos};
    scheduler_actor sched(home, config, 8);
    kv_allocator_actor kv_allocator(home, kv_allocator_params_from(config), 1);
    kv_allocator.connect(sched.inbox());
    sched.connect(kv_allocator.inbox(), executor.box, streamer.box);

    sampling_params p;
    p.temperature = 0;
    p.max_tokens = 10;
    sched.inbox().post(enqueue_request{1, std::make_shared<const std::vector<int32_t>>(testing::fake_ids("ab")),
                                       std::make_shared<const sampling_params>(p), steady_clock::now()});
    home.run_until_idle();
    for (int64_t step = 1; step <= 3; ++step) {
        step_done d;
        d.step_id = step;
        sequence_result r;
        r.seq_id = 1;
        r.tokens = {testing::fake_id('c')};
        r.t_sampled = steady_clock::now();
        d.results.push_back(std::move(r));
        sched.inbox().post(d);
        home.run_until_idle();
    }
    peers.run_until_idle();
    std::vector<request_view> requests;
    kv_view kv;
    step_view steps;
    spec_view spec;
    sched.view(requests, kv, steps, spec);
    EXPECT_EQ(kv.n_used, 0);  // the failed request's blocks are back
    EXPECT_TRUE(requests.empty());
    EXPECT_EQ(steps.n_steps, 3);
    EXPECT_EQ(executor.got, (std::vector<std::string>{"step_plan", "step_plan", "step_plan", "retire_sequences"}));
    EXPECT_EQ(streamer.box.stats().n_rejected, 1);
    EXPECT_EQ(sched.counters().n_running.load(), 0);
    stalled.run_until_idle();
    EXPECT_EQ(streamer.got, (std::vector<std::string>{"deliver_tokens", "deliver_tokens", "fail_stream"}));
    EXPECT_EQ(std::get<fail_stream>(streamer.messages[2]).message,
              "overloaded: the streamer's mailbox is full (2 deliveries); the client is not reading fast enough");
}

}  // namespace
}  // namespace troupe
