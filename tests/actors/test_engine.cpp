// The engine end to end with a fake model and codec: every request goes through the five actors.
// Most tests run every actor on one caller-driven lane, so the message order is deterministic; the engine on
// threaded lanes (planning ahead, stop and drain, concurrent submits and cancels) is in test_engine_threaded.cpp.
#include <gtest/gtest.h>

#include "actors/engine/engine.h"
#include "core/runtime/lane.h"
#include "tests/actors/fakes.h"
#include "tests/actors/sink_recorder.h"
#include "tests/common/fn_speculator.h"

namespace troupe {
namespace {

using testing::fake_id;
using testing::fake_model_params;
using testing::fake_model_runner;
using testing::greedy;
using testing::record_into;
using testing::sink_record;

struct manual_engine {
    explicit manual_engine(engine_params params = {}, fake_model_params model = {}, testing::chain_fn draft = {})
        : runner(std::make_shared<fake_model_runner>(model)),
          eng(engine_parts{runner, std::make_shared<testing::fake_codec>(), testing::speculator_from(std::move(draft))},
              params, lane_) {
        EXPECT_TRUE(eng.start().ok());
    }

    std::shared_ptr<sink_record> submit(std::string prompt, sampling_params p) {
        auto r = std::make_shared<sink_record>();
        auto id = eng.submit(request{std::move(prompt), std::move(p), std::nullopt}, record_into(r));
        EXPECT_TRUE(id.ok()) << id.message();
        return r;
    }
    void run() { lane_.run_until_idle(); }

    lane lane_{"test"};
    std::shared_ptr<fake_model_runner> runner;
    engine eng;
};

TEST(engine, a_request_flows_through_the_actors_in_the_expected_message_order) {
    manual_engine e;
    std::vector<std::string> trace;
    e.lane_.set_trace([&](const std::string& event) { trace.push_back(event); });
    auto r = e.submit("ab", greedy(2));
    e.run();

    const std::vector<std::string> expected = {
        "tokenizer <- submit_request",
        "streamer <- open_stream",
        "scheduler <- enqueue_request",
        "scheduler <- plan_tick",
        // One round trip to the KV allocator per step: blocks for the prompt, then the plan.
        "kv_allocator <- kv_step_request",
        "scheduler <- kv_step_grant",
        "executor <- step_plan",
        // The decode is planned ahead while the prefill runs (on this one lane: after it), its token
        // left to the executor; the prefill's result arrives before that plan's grant.
        "scheduler <- plan_tick",
        "scheduler <- step_done",
        "kv_allocator <- kv_step_request",  // one more block row for the decode
        "streamer <- deliver_tokens",
        "scheduler <- kv_step_grant",
        "executor <- step_plan",
        "scheduler <- step_done",
        "streamer <- deliver_tokens",
        "executor <- retire_sequences",
        "kv_allocator <- kv_step_request",  // the finished request's blocks go back
        "scheduler <- kv_step_grant",
    };
    EXPECT_EQ(trace, expected);
    const auto boxes = e.eng.stats().mailboxes;
    ASSERT_EQ(boxes.size(), 5u);
    std::vector<std::string> names;
    for (const auto& b : boxes) names.push_back(b.name);
    EXPECT_EQ(names, (std::vector<std::string>{"tokenizer", "scheduler", "kv_allocator", "executor", "streamer"}));
    EXPECT_EQ(boxes[2].n_handled, 3);
    EXPECT_EQ(e.eng.snapshot().kv.n_used, 0);
    EXPECT_EQ(r->text, "cd");
    EXPECT_EQ(r->deltas, (std::vector<std::string>{"c", "d"}));
    ASSERT_TRUE(r->finish.has_value());
    EXPECT_EQ(*r->finish, finish_reason::length);
    EXPECT_EQ(r->use.n_prompt_tokens, 3);
    EXPECT_EQ(r->use.n_completion_tokens, 2);
    EXPECT_EQ(r->n_endings, 1);

    // The prefill ran the whole prompt at position 0, the decode the sampled token at position 3.
    auto batches = e.runner->batches();
    ASSERT_EQ(batches.size(), 2u);
    EXPECT_EQ(batches[0].seqs[0].tokens, testing::fake_ids("ab"));
    EXPECT_EQ(batches[0].seqs[0].pos0, 0);
    EXPECT_EQ(batches[1].seqs[0].tokens, std::vector<int32_t>{fake_id('c')});
    EXPECT_EQ(batches[1].seqs[0].pos0, 3);
}

TEST(engine, stop_conditions_end_requests_with_the_right_reason_and_text) {
    struct case_t {
        const char* name;
        std::string prompt;
        sampling_params params;
        std::string text;
        finish_reason finish;
        int32_t n_completion;
    };
    sampling_params stop_token = greedy(20);
    stop_token.stop_tokens = {fake_id('e')};
    sampling_params ignore = greedy(3);
    ignore.ignore_eos = true;
    sampling_params stop_string = greedy(20);
    stop_string.stop_strings = {"ef", "zz"};
    sampling_params stop_first = greedy(20);
    stop_first.stop_strings = {"c"};
    std::vector<case_t> cases = {
        {"max_tokens", "ab", greedy(4), "cdef", finish_reason::length, 4},
        {"end of generation token (counted, not shown)", "wx", greedy(20), "yz", finish_reason::stop, 3},
        {"stop token", "ab", stop_token, "cd", finish_reason::stop, 3},
        {"ignore_eos runs past EOS", "xy", ignore, "za", finish_reason::length, 3},
        {"stop string spanning two tokens", "ab", stop_string, "cd", finish_reason::stop, 4},
        {"stop string in the first token", "ab", stop_first, "", finish_reason::stop, 1},
        {"context full", std::string(60, 'a'), greedy(100), "bcde", finish_reason::context_full, 4},
    };
    for (const auto& c : cases) {
        manual_engine e;
        auto r = e.submit(c.prompt, c.params);
        e.run();
        SCOPED_TRACE(c.name);
        EXPECT_EQ(r->text, c.text);
        ASSERT_TRUE(r->finish.has_value()) << (r->error ? *r->error : "no ending");
        EXPECT_EQ(*r->finish, c.finish);
        EXPECT_EQ(r->use.n_completion_tokens, c.n_completion);
        EXPECT_EQ(r->n_endings, 1);
    }
}

TEST(engine, a_stop_string_is_never_partly_shown_and_frees_the_request_for_the_next) {
    engine_params params;
    params.max_running = 1;
    fake_model_params model;
    model.n_blocks = 1;  // room for one sequence: the next request needs the blocks back
    manual_engine e(params, model);
    sampling_params p = greedy(20);
    p.stop_strings = {"efg"};
    auto first = e.submit("ab", p);
    auto second = e.submit("mn", greedy(3));
    e.run();
    EXPECT_EQ(first->deltas, (std::vector<std::string>{"c", "d"}));  // "e" and "f" were held back, then cut
    EXPECT_EQ(*first->finish, finish_reason::stop);
    EXPECT_EQ(second->text, "opq");
    EXPECT_EQ(*second->finish, finish_reason::length);
}

TEST(engine, cancel_mid_generation_ends_the_request_as_cancelled) {
    manual_engine e;
    auto r = std::make_shared<sink_record>();
    auto id = e.eng.submit(request{"ab", greedy(20), std::nullopt}, record_into(r));
    ASSERT_TRUE(id.ok());
    while (r->deltas.size() < 3) ASSERT_EQ(e.lane_.poll_one(), 1u);
    e.eng.cancel(*id);
    e.run();
    ASSERT_TRUE(r->finish.has_value());
    EXPECT_EQ(*r->finish, finish_reason::cancelled);
    EXPECT_LT(r->text.size(), 8u);
    EXPECT_EQ(r->text, std::string("cdefghijklmnopqrstuvwxyz").substr(0, r->text.size()));
    EXPECT_EQ(e.eng.stats().n_cancelled, 1);
    EXPECT_EQ(e.eng.stats().n_in_flight, 0);
    // Cancelling a finished request does nothing.
    e.eng.cancel(*id);
    e.run();
    EXPECT_EQ(r->n_endings, 1);
}

TEST(engine, a_request_cancelled_before_it_is_tokenized_never_runs) {
    manual_engine e;
    auto r = std::make_shared<sink_record>();
    auto id = e.eng.submit(request{"ab", greedy(20), std::nullopt}, record_into(r));
    ASSERT_TRUE(id.ok());
    e.eng.cancel(*id);
    e.run();
    EXPECT_EQ(*r->finish, finish_reason::cancelled);
    EXPECT_EQ(r->text, "");
    EXPECT_TRUE(e.runner->batches().empty());
}

TEST(engine, a_full_submission_mailbox_answers_overloaded_and_the_accepted_requests_finish) {
    engine_params params;
    params.submit_capacity = 2;
    manual_engine e(params);
    std::vector<std::shared_ptr<sink_record>> records;
    std::vector<result<request_id>> ids;
    for (int i = 0; i < 3; ++i) {
        records.push_back(std::make_shared<sink_record>());
        ids.push_back(e.eng.submit(request{"ab", greedy(2), std::nullopt}, record_into(records.back())));
    }
    EXPECT_TRUE(ids[0].ok());
    EXPECT_TRUE(ids[1].ok());
    ASSERT_FALSE(ids[2].ok());
    EXPECT_EQ(ids[2].message().rfind("overloaded:", 0), 0u) << ids[2].message();
    e.run();
    EXPECT_EQ(records[0]->text, "cd");
    EXPECT_EQ(records[1]->text, "cd");
    EXPECT_FALSE(records[2]->ended());
    EXPECT_EQ(e.eng.stats().n_refused, 1);
    EXPECT_EQ(e.eng.stats().mailboxes[0].n_rejected, 1);
    // Once drained, the mailbox takes requests again.
    auto again = e.submit("ab", greedy(1));
    e.run();
    EXPECT_EQ(again->text, "c");
}

TEST(engine, a_full_waiting_queue_fails_the_request_as_overloaded) {
    engine_params params;
    params.max_waiting = 1;
    params.max_running = 1;
    manual_engine e(params);
    auto a = e.submit("ab", greedy(2));
    auto b = e.submit("cd", greedy(2));
    e.run();
    EXPECT_EQ(a->text, "cd");
    ASSERT_TRUE(b->error.has_value());
    EXPECT_EQ(b->error->rfind("overloaded:", 0), 0u) << *b->error;
}

TEST(engine, a_throwing_handler_fails_only_its_request_and_the_next_one_succeeds) {
    struct case_t {
        const char* name;
        std::string prompt;
        const char* error_prefix;
    };
    for (const auto& c : std::vector<case_t>{{"tokenizer throws", "ab #throw", "tokenizer: fake codec"},
                                             {"executor throws", "ab!", "step 1 failed: executor: fake model"}}) {
        SCOPED_TRACE(c.name);
        manual_engine e;
        auto bad = e.submit(c.prompt, greedy(4));
        e.run();
        ASSERT_TRUE(bad->error.has_value());
        EXPECT_EQ(bad->error->rfind(c.error_prefix, 0), 0u) << *bad->error;
        EXPECT_EQ(bad->n_endings, 1);
        auto good = e.submit("ab", greedy(3));
        e.run();
        EXPECT_EQ(good->text, "cde");
        EXPECT_EQ(*good->finish, finish_reason::length);
        auto s = e.eng.stats();
        EXPECT_EQ(s.n_failed, 1);
        EXPECT_EQ(s.n_completed, 1);
        int64_t n_handler_failures = 0;
        for (const auto& m : s.mailboxes) n_handler_failures += m.n_handler_failures;
        EXPECT_EQ(n_handler_failures, 1);
    }
}

TEST(engine, a_throwing_sink_fails_that_request_and_the_engine_goes_on) {
    manual_engine e;
    request_sink bad;
    std::string error;
    bad.on_text = [](std::string_view) { throw std::runtime_error("client went away"); };
    bad.on_error = [&](const std::string& m) { error = m; };
    ASSERT_TRUE(e.eng.submit(request{"ab", greedy(5), std::nullopt}, bad).ok());
    e.run();
    EXPECT_EQ(error, "streamer: client went away");
    auto good = e.submit("ab", greedy(2));
    e.run();
    EXPECT_EQ(good->text, "cd");
    EXPECT_EQ(e.eng.stats().n_in_flight, 0);
}

TEST(engine, prompts_that_cannot_run_fail_with_a_clear_message) {
    struct case_t {
        const char* name;
        request req;
        const char* error;
    };
    sampling_params zero = greedy(0);
    std::vector<case_t> cases = {
        {"empty prompt ids", {"", greedy(3), std::vector<int32_t>{}}, "the prompt is empty"},
        {"id out of range",
         {"", greedy(3), std::vector<int32_t>{1, 300}},
         "prompt_ids[1] = 300 is outside the vocabulary [0, 300)"},
        {"prompt fills the context",
         {std::string(64, 'a'), greedy(3), std::nullopt},
         "the prompt has 65 tokens; the context holds 64, so at most 63 fit"},
        {"max_tokens 0", {"ab", zero, std::nullopt}, "max_tokens must be at least 1, got 0"},
    };
    for (auto& c : cases) {
        SCOPED_TRACE(c.name);
        manual_engine e;
        auto r = std::make_shared<sink_record>();
        ASSERT_TRUE(e.eng.submit(c.req, record_into(r)).ok());
        e.run();
        ASSERT_TRUE(r->error.has_value());
        EXPECT_EQ(*r->error, c.error);
    }
}

TEST(engine, prompt_ids_are_used_as_given) {
    manual_engine e;
    auto r = std::make_shared<sink_record>();
    ASSERT_TRUE(e.eng.submit(request{"ignored", greedy(2), testing::fake_ids("mn", false)}, record_into(r)).ok());
    e.run();
    EXPECT_EQ(r->text, "op");
    EXPECT_EQ(r->use.n_prompt_tokens, 2);
}

TEST(engine, batched_requests_give_the_same_tokens_as_requests_run_alone) {
    std::vector<std::string> prompts = {"ab", "mno", "x", "fgh"};
    sampling_params p;
    p.temperature = 0.9f;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.max_tokens = 12;
    std::vector<std::string> alone;
    for (size_t i = 0; i < prompts.size(); ++i) {
        manual_engine e;
        p.seed = 100 + i;
        auto r = e.submit(prompts[i], p);
        e.run();
        alone.push_back(r->text);
    }
    manual_engine e;
    std::vector<std::shared_ptr<sink_record>> together;
    for (size_t i = 0; i < prompts.size(); ++i) {
        p.seed = 100 + i;
        together.push_back(e.submit(prompts[i], p));
    }
    e.run();
    size_t max_batch = 0;
    for (const auto& b : e.runner->batches()) max_batch = std::max(max_batch, b.seqs.size());
    EXPECT_EQ(max_batch, prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i]->text, alone[i]) << prompts[i];
    // The sampled text is not simply the greedy one (the test would not notice a wrong seed otherwise).
    int n_differ = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        manual_engine g;
        auto r = g.submit(prompts[i], greedy(12));
        g.run();
        n_differ += r->text != alone[i];
    }
    EXPECT_GT(n_differ, 0);
}

TEST(engine, requests_beyond_max_running_wait_and_run_when_a_slot_frees) {
    engine_params params;
    params.max_running = 2;
    manual_engine e(params);
    std::vector<std::shared_ptr<sink_record>> rs;
    for (const char* prompt : {"ab", "cd", "ef", "gh", "ij"}) rs.push_back(e.submit(prompt, greedy(3)));
    e.run();
    EXPECT_EQ(rs[0]->text, "cde");
    EXPECT_EQ(rs[4]->text, "klm");
    for (const auto& b : e.runner->batches()) EXPECT_LE(b.seqs.size(), 2u);
    EXPECT_EQ(e.eng.stats().n_completed, 5);
}

// A draft proposer that is right twice, then wrong: exercises acceptance, rejection and bonus tokens.
testing::chain_fn sometimes_wrong_drafts() {
    return [](int64_t, std::span<const int32_t> context, int32_t max_draft) {
        std::vector<int32_t> d;
        int32_t t = context.back();
        for (int32_t i = 0; i < max_draft; ++i) {
            t = (i == 2) ? fake_id('q') : testing::fake_next(t);
            d.push_back(t);
        }
        return d;
    };
}

TEST(engine, speculative_decoding_gives_the_same_greedy_output_as_plain_decoding) {
    std::vector<std::string> prompts = {"ab", "pq", "u", "xy"};
    auto run_all = [&](bool speculative) {
        engine_params params;
        params.max_draft = 4;
        manual_engine e(params, {}, speculative ? sometimes_wrong_drafts() : testing::chain_fn{});
        std::vector<std::shared_ptr<sink_record>> rs;
        for (const auto& prompt : prompts) rs.push_back(e.submit(prompt, greedy(9)));
        e.run();
        std::vector<std::string> out;
        for (const auto& r : rs) out.push_back(r->text + "|" + std::string(finish_reason_name(*r->finish)));
        return std::pair{out, e.eng.stats()};
    };
    auto [plain, plain_stats] = run_all(false);
    auto [spec, spec_stats] = run_all(true);
    EXPECT_EQ(spec, plain);
    EXPECT_EQ(plain[0], "cdefghijk|length");
    EXPECT_EQ(plain[3], "z|stop");
    EXPECT_EQ(plain_stats.n_drafted, 0);
    EXPECT_GT(spec_stats.n_drafted, 0);
    EXPECT_GT(spec_stats.draft_acceptance, 0.3);
    EXPECT_LT(spec_stats.draft_acceptance, 1.0);
    EXPECT_LT(spec_stats.n_steps, plain_stats.n_steps);
}

TEST(engine, the_snapshot_reports_speculation_for_its_plugin) {
    engine_params params;
    params.max_draft = 4;
    params.adaptive_draft = false;  // every decode step drafts: the figures below count them all
    manual_engine e(params, {}, sometimes_wrong_drafts());
    EXPECT_TRUE(e.eng.snapshot().spec.plugin == "test/fn");
    for (const auto& prompt : {"ab", "pq"}) e.submit(prompt, greedy(9));
    e.run();
    const engine_stats st = e.eng.stats();
    const spec_view v = e.eng.snapshot().spec;
    EXPECT_EQ(v.max_draft, 4);
    EXPECT_FALSE(v.adaptive);
    EXPECT_EQ(v.n_drafted, st.n_drafted);
    EXPECT_EQ(v.n_accepted, st.n_draft_accepted);
    ASSERT_GT(v.n_draft_steps, 0);
    EXPECT_DOUBLE_EQ(v.acceptance_rate, static_cast<double>(v.n_accepted) / static_cast<double>(v.n_drafted));
    EXPECT_DOUBLE_EQ(v.acceptance_length, 1 + static_cast<double>(v.n_accepted) / static_cast<double>(v.n_draft_steps));
    EXPECT_GT(v.draft_length, 0);
    EXPECT_LE(v.draft_length, 4);
    EXPECT_EQ(v.n_steps_off, 0);
    EXPECT_GT(v.n_steps_on, 0);

    manual_engine plain;
    EXPECT_TRUE(plain.eng.snapshot().spec.plugin.empty());
}

TEST(engine, stats_report_the_per_token_overhead) {
    manual_engine e;
    auto r = e.submit("ab", greedy(10));
    e.run();
    auto s = e.eng.stats();
    EXPECT_EQ(s.token_overhead.n, 10);
    EXPECT_GT(s.token_overhead.median_us, 0.0);
    EXPECT_LE(s.token_overhead.median_us, s.token_overhead.p99_us);
    EXPECT_EQ(s.n_tokens, 10);
    EXPECT_EQ(s.n_steps, 10);
}

}  // namespace
}  // namespace troupe
