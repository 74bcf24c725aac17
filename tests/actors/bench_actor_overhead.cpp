// Benchmark (not a test): the actor pipeline's own cost per generated token, from the moment the
// executor has sampled a token to the moment the streamer hands its text to the sink, with a fake
// model whose forward costs next to nothing. Prints median / p90 / p99 per lane layout and the
// ratio of the median to the 50 us target.
//
//   bench_actor_overhead [--requests N] [--tokens T] [--running R] [--draft D]
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "actors/engine/engine.h"
#include "core/log/log.h"
#include "tests/actors/fakes.h"
#include "tests/common/fn_speculator.h"

namespace {

struct options {
    int requests = 64;
    int tokens = 256;
    int running = 8;
    int draft = 0;
};

const char* layout_name(troupe::lane_layout l) {
    switch (l) {
        case troupe::lane_layout::one_lane:
            return "one_lane";
        case troupe::lane_layout::control_and_compute:
            return "control_and_compute";
        case troupe::lane_layout::lane_per_actor:
            return "lane_per_actor";
    }
    return "?";
}

int run(const options& o, troupe::lane_layout layout) {
    using namespace troupe;
    testing::fake_model_params mp;
    mp.n_ctx = o.tokens + 16;
    mp.block_size = mp.n_ctx;
    mp.n_blocks = o.running;
    auto runner = std::make_shared<testing::fake_model_runner>(mp);
    runner->keep_batches(false);
    engine_params ep;
    ep.lanes = layout;
    ep.max_running = o.running;
    ep.max_draft = o.draft;
    testing::chain_fn draft;
    if (o.draft > 0) {
        draft = [](int64_t, std::span<const int32_t> ctx, int32_t max_draft) {
            std::vector<int32_t> d;
            int32_t t = ctx.back();
            for (int32_t i = 0; i < max_draft; ++i) d.push_back(t = testing::fake_next(t));
            return d;
        };
    }
    engine eng(engine_parts{runner, std::make_shared<testing::fake_codec>(), testing::speculator_from(draft)}, ep);
    if (!eng.start().ok()) return 1;

    std::mutex m;
    std::condition_variable cv;
    int n_left = o.requests;
    int64_t n_bytes = 0;
    request_sink sink;
    sink.on_text = [&](std::string_view d) { n_bytes += static_cast<int64_t>(d.size()); };
    sink.on_done = [&](finish_reason, const usage&, const timings&) {
        std::lock_guard lock(m);
        if (--n_left == 0) cv.notify_all();
    };
    sink.on_error = [&](const std::string& e) {
        std::fprintf(stderr, "request failed: %s\n", e.c_str());
        std::lock_guard lock(m);
        if (--n_left == 0) cv.notify_all();
    };
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = o.tokens;
    p.ignore_eos = true;
    const auto t0 = steady_clock::now();
    for (int i = 0; i < o.requests; ++i) {
        auto id = eng.submit(request{"a", p, std::nullopt}, sink);
        if (!id.ok()) {
            std::fprintf(stderr, "submit: %s\n", id.message().c_str());
            return 1;
        }
    }
    {
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return n_left == 0; });
    }
    const double seconds = std::chrono::duration<double>(steady_clock::now() - t0).count();
    auto s = eng.stats();
    (void)eng.stop(std::chrono::seconds(5));
    const auto& h = s.token_overhead;
    std::printf(
        "%-20s tokens %7lld  steps %6lld  %8.0f tok/s  overhead us: median %6.2f  p90 %6.2f  p99 %7.2f  "
        "max %8.1f  (median / 50 us target = %.2f)\n",
        layout_name(layout), static_cast<long long>(h.n), static_cast<long long>(s.n_steps),
        static_cast<double>(s.n_tokens) / seconds, h.median_us, h.p90_us, h.p99_us, h.max_us, h.median_us / 50.0);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--requests"))
            o.requests = v;
        else if (!std::strcmp(argv[i], "--tokens"))
            o.tokens = v;
        else if (!std::strcmp(argv[i], "--running"))
            o.running = v;
        else if (!std::strcmp(argv[i], "--draft"))
            o.draft = v;
        else {
            std::fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    troupe::set_log_level(troupe::log_level::warn);
    std::printf(
        "actor pipeline overhead per token (sampled -> delivered): %d requests x %d tokens, %d running, "
        "draft %d, fake model with ~zero compute\n",
        o.requests, o.tokens, o.running, o.draft);
    for (auto layout : {troupe::lane_layout::one_lane, troupe::lane_layout::control_and_compute,
                        troupe::lane_layout::lane_per_actor}) {
        if (run(o, layout) != 0) return 1;
    }
    return 0;
}
