// The streamer's core: detokenized deltas, stop strings with hold-back, endings, overhead records.
#include <gtest/gtest.h>

#include "actors/streamer/streamer_core.h"
#include "tests/actors/fakes.h"
#include "tests/actors/sink_recorder.h"

namespace troupe {
namespace {

using testing::fake_id;

struct fixture {
    fixture()
        : core(std::make_shared<testing::fake_codec>(), &overhead,
               [this](request_id id, request_outcome o) { ended.emplace_back(id, o); }) {}

    std::shared_ptr<testing::sink_record> open(request_id id, std::vector<std::string> stops) {
        auto r = std::make_shared<testing::sink_record>();
        open_stream o;
        o.id = id;
        o.sink = std::make_shared<const request_sink>(testing::record_into(r));
        o.stop_strings = std::make_shared<const std::vector<std::string>>(std::move(stops));
        o.n_prompt_tokens = 3;
        o.t_submit = steady_clock::now();
        core.open(o);
        return r;
    }
    void deliver(request_id id, std::string text, std::optional<finish_reason> finish = std::nullopt) {
        token_delivery d;
        d.id = id;
        for (char c : text) d.tokens.push_back(fake_id(c));
        d.n_counted = static_cast<int32_t>(d.tokens.size());
        d.t_sampled = steady_clock::now();
        d.t_admitted = d.t_sampled;
        d.finish = finish;
        core.deliver(deliver_tokens{{d}}, stopped);
    }

    latency_histogram overhead;
    std::vector<std::pair<request_id, request_outcome>> ended;
    streamer_core core;
    std::vector<request_id> stopped;
};

TEST(streamer_core, text_that_could_start_a_stop_string_is_held_until_it_cannot) {
    struct case_t {
        const char* name;
        std::vector<std::string> stops;
        std::vector<std::string> deliveries;
        std::vector<std::string> deltas;
        bool stopped;
    };
    const std::vector<case_t> cases = {
        {"no stop strings", {}, {"ab", "c"}, {"ab", "c"}, false},
        {"a prefix held, then released", {"cat"}, {"xc", "a", "b"}, {"x", "cab"}, false},
        {"stop string across three deliveries", {"cat"}, {"xc", "a", "tz"}, {"x"}, true},
        {"stop string inside one delivery", {"dog"}, {"adogb"}, {"a"}, true},
        {"earliest of two stop strings", {"yz", "bc"}, {"abcxyz"}, {"a"}, true},
        {"overlapping prefixes keep the longest", {"aab"}, {"aa", "aab"}, {"aa"}, true},
        {"a possible start stays held", {"cat"}, {"xca"}, {"x"}, false},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        fixture f;
        auto r = f.open(1, c.stops);
        for (const auto& d : c.deliveries) f.deliver(1, d);
        EXPECT_EQ(r->deltas, c.deltas);
        EXPECT_EQ(f.stopped, c.stopped ? std::vector<request_id>{1} : std::vector<request_id>{});
        EXPECT_EQ(r->ended(), c.stopped);
        if (c.stopped) {
            EXPECT_EQ(*r->finish, finish_reason::stop);
        }
    }
    fixture f;
    auto r = f.open(1, {"cat"});
    f.deliver(1, "xca");
    f.deliver(1, "", finish_reason::length);
    EXPECT_EQ(r->text, "xca");
    EXPECT_EQ(*r->finish, finish_reason::length);
    EXPECT_TRUE(f.stopped.empty());  // the scheduler ended it; it need not be told
}

TEST(streamer_core, endings_report_usage_and_reach_the_engine_once) {
    fixture f;
    auto done = f.open(1, {});
    auto failed = f.open(2, {});
    auto cancelled = f.open(3, {});
    f.deliver(1, "abc", finish_reason::length);
    f.core.fail(2, "step 3 failed: out of memory");
    f.deliver(3, "", finish_reason::cancelled);
    f.deliver(1, "zz");  // late tokens for an ended stream are dropped
    f.core.fail(1, "late");
    EXPECT_EQ(done->text, "abc");
    EXPECT_EQ(done->use.n_prompt_tokens, 3);
    EXPECT_EQ(done->use.n_completion_tokens, 3);
    EXPECT_EQ(done->n_endings, 1);
    EXPECT_EQ(*failed->error, "step 3 failed: out of memory");
    EXPECT_EQ(*cancelled->finish, finish_reason::cancelled);
    EXPECT_EQ(f.ended, (std::vector<std::pair<request_id, request_outcome>>{
                           {1, request_outcome::done}, {2, request_outcome::failed}, {3, request_outcome::cancelled}}));
    EXPECT_EQ(f.core.n_open(), 0u);
    EXPECT_EQ(f.overhead.summary().n, 3);  // one record per token
}

// fake_codec whose "special" token k_fake_eos is written as the text the stream asks to show.
class showing_codec : public testing::fake_codec {
public:
    std::unique_ptr<text_decoder> make_decoder_showing(const std::vector<std::string>& texts) const override {
        struct decoder : testing::fake_decoder {
            std::string shown;
            std::string push(int32_t id) override { return id == testing::k_fake_eos ? shown : fake_decoder::push(id); }
        };
        auto d = std::make_unique<decoder>();
        for (const auto& t : texts) d->shown += t;
        return d;
    }
};

TEST(streamer_core, a_stream_asking_for_special_tokens_gets_a_decoder_that_writes_them) {
    latency_histogram overhead;
    streamer_core core(std::make_shared<showing_codec>(), &overhead, [](request_id, request_outcome) {});
    std::vector<std::shared_ptr<testing::sink_record>> records;
    for (request_id id : {1, 2}) {
        records.push_back(std::make_shared<testing::sink_record>());
        open_stream o;
        o.id = id;
        o.sink = std::make_shared<const request_sink>(testing::record_into(records.back()));
        if (id == 1)
            o.shown_specials = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"<m>"});
        o.t_submit = steady_clock::now();
        core.open(o);
    }
    std::vector<token_delivery> entries;
    for (request_id id : {1, 2}) {
        token_delivery d;
        d.id = id;
        d.tokens = {testing::fake_id('a'), testing::k_fake_eos, testing::fake_id('b')};
        d.n_counted = 3;
        d.t_sampled = steady_clock::now();
        d.t_admitted = d.t_sampled;
        entries.push_back(std::move(d));
    }
    std::vector<request_id> stopped;
    core.deliver(deliver_tokens{std::move(entries)}, stopped);
    EXPECT_EQ(records[0]->text, "a<m>b");
    EXPECT_EQ(records[1]->text, "ab");
}

TEST(streamer_core, close_all_fails_every_open_stream_with_the_reason) {
    fixture f;
    auto a = f.open(1, {});
    auto b = f.open(2, {});
    f.core.close_all("engine stopped");
    EXPECT_EQ(*a->error, "engine stopped");
    EXPECT_EQ(*b->error, "engine stopped");
    EXPECT_EQ(f.ended.size(), 2u);
}

}  // namespace
}  // namespace troupe
