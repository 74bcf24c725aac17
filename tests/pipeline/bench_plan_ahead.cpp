// bench_plan_ahead: how long the executor waits between steps, with the scheduler planning each step
// after the previous one's result (scheduler.plan_ahead false) and planning it while the previous one
// runs (true, the default). A benchmark, not a test: it prints, per number of concurrent greedy streams,
// the decode throughput, the executor's mean idle time per step (a step's start minus the previous
// step's end, while sequences were running), its share of the executor's time, the longest gap, and how
// many steps were planned ahead. Each figure is the best of two interleaved rounds (a shared machine).
//
//   bench_plan_ahead [--model M.gguf] [--threads N] [--tokens T]   (default model: stories260K)
//   bench_plan_ahead --fake-step-us U [--tokens T]   (a fake model whose forward keeps one core busy U us:
//                                                     the scheduling alone, without a real model's noise)
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "actors/engine/engine.h"
#include "actors/engine/engine_params_from.h"
#include "actors/tokenizer/tokenizer_codec.h"
#include "core/loader/model_loader.h"
#include "core/log/log.h"
#include "tests/actors/fakes.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

struct figures {
    double tokens_per_s = 0;
    int64_t n_steps = 0;
    int64_t n_ahead = 0;
    int64_t n_gaps = 0;
    double idle_s = 0, busy_s = 0, idle_max_s = 0;
};

figures run(const std::shared_ptr<model_runner>& runner, const std::shared_ptr<const text_codec>& codec,
            engine_params params, int n_streams, int n_tokens) {
    engine eng(engine_parts{runner, codec, {}}, params);
    figures f;
    if (!eng.start().ok()) return f;
    std::mutex mutex;
    std::condition_variable cv;
    int n_done = 0;
    int64_t n_generated = 0;
    const auto t0 = steady_clock::now();
    for (int i = 0; i < n_streams; ++i) {
        sampling_params p;
        p.temperature = 0;
        p.max_tokens = n_tokens;
        p.ignore_eos = true;
        request_sink sink;
        sink.on_done = [&](finish_reason, const usage& u, const timings&) {
            std::lock_guard lock(mutex);
            n_generated += u.n_completion_tokens;
            n_done++;
            cv.notify_all();
        };
        sink.on_error = [&](const std::string& m) {
            std::fprintf(stderr, "bench_plan_ahead: a request failed: %s\n", m.c_str());
            std::lock_guard lock(mutex);
            n_done++;
            cv.notify_all();
        };
        const std::string prompt = "Once upon a time, " + std::to_string(i);
        if (!eng.submit(request{prompt, p, std::nullopt}, sink).ok()) return f;
    }
    {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return n_done == n_streams; });
    }
    const double seconds = std::chrono::duration<double>(steady_clock::now() - t0).count();
    const step_view s = eng.snapshot().steps;
    (void)eng.stop(std::chrono::seconds(5));
    f.tokens_per_s = static_cast<double>(n_generated) / seconds;
    f.n_steps = s.n_steps;
    f.n_ahead = s.n_steps_ahead;
    f.n_gaps = s.n_idle_gaps;
    f.idle_s = s.executor_idle_s;
    f.busy_s = s.executor_busy_s;
    f.idle_max_s = s.executor_idle_max_s;
    return f;
}

void print_row(int n_streams, bool ahead, const figures& f) {
    const double per_gap_us = f.n_gaps > 0 ? 1e6 * f.idle_s / static_cast<double>(f.n_gaps) : 0;
    const double busy_ms = f.n_gaps > 0 ? 1e3 * f.busy_s / static_cast<double>(f.n_gaps) : 0;
    const double share = f.idle_s + f.busy_s > 0 ? 100 * f.idle_s / (f.idle_s + f.busy_s) : 0;
    std::printf("| %d | %s | %.0f | %lld | %.3f | %.1f | %.2f%% | %.2f | %lld |\n", n_streams, ahead ? "on" : "off",
                f.tokens_per_s, static_cast<long long>(f.n_steps), busy_ms, per_gap_us, share, 1e3 * f.idle_max_s,
                static_cast<long long>(f.n_ahead));
}

int main_impl(int argc, char** argv) {
    engine_config config;
    int n_tokens = 200;
    int fake_step_us = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--model")) config.model = argv[i + 1];
        if (!std::strcmp(argv[i], "--threads")) config.threads = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--tokens")) n_tokens = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--fake-step-us")) fake_step_us = std::atoi(argv[i + 1]);
    }
    set_log_level(log_level::warn);
    config.scheduler.max_running_seqs = 16;
    std::shared_ptr<model_runner> runner;
    std::shared_ptr<const text_codec> codec;
    if (fake_step_us > 0) {
        testing::fake_model_params mp;
        mp.n_ctx = n_tokens + 32;
        mp.block_size = 16;
        mp.n_blocks = 16 * (mp.n_ctx / 16 + 1);
        mp.step_time = std::chrono::microseconds(fake_step_us);
        auto fake = std::make_shared<testing::fake_model_runner>(mp);
        fake->keep_batches(false);
        runner = fake;
        codec = std::make_shared<testing::fake_codec>();
    } else if (config.model.empty()) {
        auto found = testing::shared_file("models/stories260K.gguf");
        if (!found) {
            std::fprintf(stderr, "bench_plan_ahead: %s; or pass --model FILE\n",
                         testing::missing_shared_message("models/stories260K.gguf").c_str());
            return 1;
        }
        config.model = *found;
    }
    if (!runner) {
        auto m = load_model(config);
        if (!m.ok()) {
            std::fprintf(stderr, "bench_plan_ahead: %s\n", m.message().c_str());
            return 1;
        }
        runner = std::shared_ptr<model_runner>(std::move(m->runner));
        codec = make_tokenizer_codec(m->tok);
    }
    const int max_tokens = std::min(n_tokens, runner->n_ctx() - 32);
    std::printf("bench_plan_ahead: %s, %d tokens per stream (greedy), best of 2 interleaved rounds\n\n",
                runner->description().c_str(), max_tokens);
    std::printf(
        "| streams | plan_ahead | tokens/s | steps | executor ms per step | executor idle per step (us) | idle share "
        "| longest idle (ms) | steps planned ahead |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int n_streams : {1, 4, 16}) {
        figures best[2];
        for (int round = 0; round < 2; ++round) {
            for (int ahead = 0; ahead < 2; ++ahead) {
                engine_params params = engine_params_from(config);
                params.plan_ahead = ahead != 0;
                const figures f = run(runner, codec, params, n_streams, max_tokens);
                if (f.tokens_per_s > best[ahead].tokens_per_s) best[ahead] = f;
            }
        }
        print_row(n_streams, false, best[0]);
        print_row(n_streams, true, best[1]);
    }
    return 0;
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
    return troupe::main_impl(argc, argv);
}
