// kv_copy_lane and step_fences: the ordering of the KV allocator's copies (swaps, copy-on-write) against the
// executor's steps, on a fake backend whose streams log what is enqueued. Happens-before is computed from the
// streams' enqueue order and their waits on recorded events (vector clocks), as a GPU would order them: a copy must
// come after the step that used its blocks, and the next step after the copy. A CPU runner has no streams.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "actors/kv_allocator/kv_copy_lane.h"
#include "core/runtime/step_fences.h"

namespace troupe {
namespace {

using clock_vector = std::map<int, int64_t>;  // stream id -> ops of that stream known to have run

// One enqueued op: what it is and what it is known to run after.
struct fake_op {
    int stream = 0;
    int64_t index = 0;  // in its stream
    std::string what;
    clock_vector after;
};

struct fake_event final : device_event {
    clock_vector at;
};

// Streams that remember every op with its vector clock: a happens-before b when b's clock covers a.
class fake_device {
public:
    class stream final : public device_stream {
    public:
        stream(fake_device& d, int id, std::string name) : d_(d), id_(id), name_(std::move(name)) {}
        std::string name() const override { return name_; }
        void* native() const override { return nullptr; }
        result<std::shared_ptr<const device_event>> record() override {
            auto e = std::make_shared<fake_event>();
            e->at = clock_;
            return std::shared_ptr<const device_event>(std::move(e));
        }
        status wait(const device_event& e) override {
            for (const auto& [s, n] : static_cast<const fake_event&>(e).at) clock_[s] = std::max(clock_[s], n);
            d_.log.push_back(name_ + " waits");
            return {};
        }
        status synchronize() override { return {}; }
        // Enqueues an op: it runs after everything this stream knows of.
        const fake_op& run(const std::string& what) {
            clock_[id_]++;
            d_.ops.push_back({id_, clock_[id_], what, clock_});
            d_.log.push_back(what);
            return d_.ops.back();
        }

    private:
        fake_device& d_;
        int id_;
        std::string name_;
        clock_vector clock_;
    };

    fake_device() : compute(*this, 0, "compute"), copies(*this, 1, "copies") {}

    const fake_op& op(const std::string& what) const {
        for (const fake_op& o : ops) {
            if (o.what == what) return o;
        }
        ADD_FAILURE() << "no op " << what;
        return ops.front();
    }
    bool before(const std::string& a, const std::string& b) const {
        const fake_op& x = op(a);
        const fake_op& y = op(b);
        auto it = y.after.find(x.stream);
        return it != y.after.end() && it->second >= x.index;
    }

    std::vector<fake_op> ops;
    std::vector<std::string> log;
    stream compute;
    stream copies;
};

// A runner whose KV copies are ops on the device's copy stream (as the CUDA runner enqueues them on its copy lane).
class copying_runner final : public model_runner {
public:
    explicit copying_runner(fake_device& d) : d_(d) {}
    std::string description() const override { return "copying runner"; }
    int32_t n_vocab() const override { return 8; }
    int32_t n_ctx() const override { return 64; }
    kv_geometry kv() const override { return {4, 16}; }
    size_t kv_bytes_per_token() const override { return 4; }
    status forward(const forward_batch&, forward_output&) override { return make_error("not used"); }
    bool separate_kv_memory() const override { return true; }
    status swap_out(int64_t seq_id, std::span<const int32_t> blocks, int32_t) override {
        if (fail_out) return make_error("device lost");
        d_.copies.run("out " + std::to_string(seq_id) + names(blocks));
        return {};
    }
    status swap_in(int64_t seq_id, std::span<const int32_t> blocks, int32_t) override {
        if (fail_in) return make_error("host copy gone");
        d_.copies.run("in " + std::to_string(seq_id) + names(blocks));
        return {};
    }
    status copy_blocks(std::span<const int32_t> src, std::span<const int32_t> dst) override {
        if (fail_copy) return make_error("no room");
        d_.copies.run("copy" + names(src) + " ->" + names(dst));
        return {};
    }
    bool fail_out = false, fail_in = false, fail_copy = false;

private:
    static std::string names(std::span<const int32_t> blocks) {
        std::string s;
        for (int32_t b : blocks) s += " " + std::to_string(b);
        return s;
    }
    fake_device& d_;
};

std::shared_ptr<const std::vector<int32_t>> table(std::vector<int32_t> blocks) {
    return std::make_shared<const std::vector<int32_t>>(std::move(blocks));
}

// The executor's side: the step waits for its grant's copies, runs, and publishes its end.
void run_step(fake_device& d, step_fences& fences, const kv_step_grant& g) {
    if (g.copies_done) {
        ASSERT_TRUE(d.compute.wait(*g.copies_done).ok());
    }
    d.compute.run("step " + std::to_string(g.step_id));
    auto e = d.compute.record();
    ASSERT_TRUE(e.ok());
    fences.publish(g.step_id, *e);
}

struct copy_lane_fixture {
    fake_device d;
    std::shared_ptr<copying_runner> runner = std::make_shared<copying_runner>(d);
    std::shared_ptr<step_fences> fences = std::make_shared<step_fences>();
    kv_copy_lane lane{runner, &d.copies, fences, 16};

    // Grants step `id` for sequences (id, table) and runs it.
    kv_step_grant step(int64_t id, std::vector<std::pair<int64_t, std::vector<int32_t>>> seqs) {
        kv_step_grant g;
        g.step_id = id;
        for (auto& [seq, blocks] : seqs) g.seqs.push_back({seq, 1, 0, table(blocks)});
        return g;
    }
};

TEST(kv_copy_lane, a_swap_out_runs_after_the_step_that_wrote_its_blocks_and_the_next_step_after_the_swap_out) {
    copy_lane_fixture f;
    kv_step_grant g1 = f.step(1, {{7, {0, 1}}});
    f.lane.run(g1, 0);
    EXPECT_EQ(g1.copies_done, nullptr);  // nothing copied: nothing to wait for
    run_step(f.d, *f.fences, g1);

    // Step 2 preempts sequence 7 by swap and gives its blocks to sequence 8.
    kv_step_grant g2 = f.step(2, {{8, {1, 0}}});
    g2.preempted.push_back({7, true, {0, 1}, 6});
    f.lane.run(g2, 1);
    ASSERT_NE(g2.copies_done, nullptr);
    EXPECT_TRUE(g2.preempted[0].swapped);
    run_step(f.d, *f.fences, g2);

    EXPECT_TRUE(f.d.before("step 1", "out 7 0 1"));
    EXPECT_TRUE(f.d.before("out 7 0 1", "step 2"));
    EXPECT_EQ(f.d.log, (std::vector<std::string>{"step 1", "copies waits", "out 7 0 1", "compute waits", "step 2"}));
}

TEST(kv_copy_lane, a_copy_waits_only_for_the_last_step_that_used_its_blocks_and_a_swap_in_after_the_steps_before) {
    copy_lane_fixture f;
    kv_step_grant g1 = f.step(1, {{7, {0, 1}}, {8, {2}}});
    f.lane.run(g1, 0);
    run_step(f.d, *f.fences, g1);
    kv_step_grant g2 = f.step(2, {{8, {2, 3}}});
    f.lane.run(g2, 1);
    run_step(f.d, *f.fences, g2);
    EXPECT_EQ(f.lane.last_step(0), 1);
    EXPECT_EQ(f.lane.last_step(3), 2);
    EXPECT_EQ(f.lane.last_step(5), -1);
    kv_step_grant windows = f.step(9, {});  // a windowed layer group's table counts as the step's too
    windows.seqs.push_back(
        {8, 1, 0, table({2}),
         std::make_shared<const std::vector<std::vector<int32_t>>>(std::vector<std::vector<int32_t>>{{11}})});
    kv_copy_lane other{f.runner, &f.d.copies, f.fences, 16};
    other.run(windows, 2);
    EXPECT_EQ(other.last_step(11), 9);
    EXPECT_EQ(other.last_step(2), 9);

    // Sequence 7 (blocks 0, 1: last used by step 1) goes out; sequence 9 comes back into 5, 6 (never used).
    kv_step_grant g3 = f.step(3, {{8, {2, 3}}, {9, {5, 6}}});
    g3.preempted.push_back({7, true, {0, 1}, 5});
    g3.admitted.push_back({9, 4, 0, 2, true, {5, 6}, ""});
    f.lane.run(g3, 2);
    EXPECT_TRUE(f.d.before("step 1", "out 7 0 1"));
    EXPECT_FALSE(f.d.before("step 2", "out 7 0 1"));  // step 2 did not touch them: no need to wait for it
    EXPECT_FALSE(f.d.before("step 2", "in 9 5 6"));
    EXPECT_EQ(g3.admitted[0].swap_error, "");
    run_step(f.d, *f.fences, g3);
    EXPECT_TRUE(f.d.before("out 7 0 1", "step 3"));
    EXPECT_TRUE(f.d.before("in 9 5 6", "step 3"));

    // Copy-on-write from block 2 (step 3 wrote it) into block 0 (freed by the swap-out): after step 3.
    kv_step_grant g4 = f.step(4, {{8, {0, 3}}});
    g4.copy_src = {2};
    g4.copy_dst = {0};
    f.lane.run(g4, 3);
    EXPECT_TRUE(g4.copy_src.empty() && g4.copy_dst.empty());  // made here: the plan carries only the event
    run_step(f.d, *f.fences, g4);
    EXPECT_TRUE(f.d.before("step 3", "copy 2 -> 0"));
    EXPECT_TRUE(f.d.before("copy 2 -> 0", "step 4"));
}

TEST(kv_copy_lane, a_step_granted_but_never_sent_is_not_waited_for) {
    copy_lane_fixture f;
    kv_step_grant g1 = f.step(1, {{7, {0, 1}}});
    f.lane.run(g1, 0);
    run_step(f.d, *f.fences, g1);
    kv_step_grant g2 = f.step(2, {{7, {0, 1, 2}}});  // its sequences ended before the plan went out
    f.lane.run(g2, 1);
    // Waiting for step 2 would never end: closed fences turn such a wait into an error (a recompute).
    f.fences->close("test: no step after 1 will be published");
    kv_step_grant g3 = f.step(2, {{8, {2}}});
    g3.preempted.push_back({7, true, {0, 1, 2}, 9});
    f.lane.run(g3, 1);
    EXPECT_TRUE(g3.preempted[0].swapped);
    EXPECT_TRUE(f.d.before("step 1", "out 7 0 1 2"));  // step 1 did use blocks 0 and 1
}

TEST(kv_copy_lane, a_copy_waits_until_the_executor_has_enqueued_the_step_it_follows) {
    copy_lane_fixture f;
    kv_step_grant g1 = f.step(1, {{7, {0, 1}}});
    f.lane.run(g1, 0);
    // The plan of step 1 is sent but the executor has not enqueued it yet when step 2's grant swaps 7 out.
    kv_step_grant g2 = f.step(2, {{8, {0, 1}}});
    g2.preempted.push_back({7, true, {0, 1}, 4});
    std::thread allocator([&] { f.lane.run(g2, 1); });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_TRUE(f.d.ops.empty());  // still waiting: nothing enqueued on the copy stream
    run_step(f.d, *f.fences, g1);
    allocator.join();
    EXPECT_TRUE(f.d.before("step 1", "out 7 0 1"));
}

TEST(kv_copy_lane, failed_copies_say_what_was_lost) {
    struct failure_case {
        const char* name;
        bool fail_out, fail_in, fail_copy;
    };
    for (const failure_case& c :
         {failure_case{"swap-out", true, false, false}, failure_case{"swap-in", false, true, false},
          failure_case{"copy-on-write", false, false, true}}) {
        SCOPED_TRACE(c.name);
        copy_lane_fixture f;
        f.runner->fail_out = c.fail_out;
        f.runner->fail_in = c.fail_in;
        f.runner->fail_copy = c.fail_copy;
        kv_step_grant g = f.step(1, {{8, {2, 3}}});
        g.preempted.push_back({7, true, {0, 1}, 5});
        g.admitted.push_back({9, 4, 0, 1, true, {4}, ""});
        g.copy_src = {2};
        g.copy_dst = {3};
        f.lane.run(g, 0);
        // A failed swap-out is a recompute; a failed swap-in loses that sequence; a failed copy fails the step.
        EXPECT_EQ(g.preempted[0].swapped, !c.fail_out);
        EXPECT_EQ(g.admitted[0].swap_error,
                  c.fail_in ? "its KV rows were lost in the swap back from host memory: host copy gone" : "");
        EXPECT_EQ(g.error, c.fail_copy ? "copy-on-write of 1 KV blocks: no room" : "");
    }
}

TEST(kv_copy_lane, without_a_stream_the_copies_run_after_the_steps_returned_and_carry_no_event) {
    fake_device d;
    auto runner = std::make_shared<copying_runner>(d);
    auto fences = std::make_shared<step_fences>();
    kv_copy_lane lane(runner, nullptr, fences, 16);
    kv_step_grant g1;
    g1.step_id = 1;
    g1.seqs.push_back({7, 1, 0, table({0})});
    lane.run(g1, 0);
    fences->publish(1, nullptr);  // a CPU step is over when it is published
    kv_step_grant g2;
    g2.step_id = 2;
    g2.preempted.push_back({7, true, {0}, 2});
    lane.run(g2, 1);
    EXPECT_EQ(g2.copies_done, nullptr);
    EXPECT_EQ(d.log, (std::vector<std::string>{"out 7 0"}));
}

TEST(step_fences, await_gives_the_first_step_published_at_or_after_and_close_wakes_waiters) {
    step_fences fences;
    fake_device d;
    auto e3 = *d.compute.record();
    auto e5 = *d.compute.record();
    fences.publish(3, e3);
    fences.publish(2, nullptr);  // older than the last: ignored
    EXPECT_EQ(fences.last_published(), 3);
    EXPECT_EQ(*fences.await(1), e3);
    fences.publish(5, e5);
    EXPECT_EQ(*fences.await(4), e5);
    std::thread waiter([&] {
        auto r = fences.await(9);
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.message(), "waiting for step 9: engine stopped");
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    fences.close("engine stopped");
    waiter.join();
    EXPECT_EQ(*fences.await(5), e5);  // published before the close: still answered
}

}  // namespace
}  // namespace troupe
