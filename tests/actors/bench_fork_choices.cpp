// Benchmark (not a test): n choices of one prompt, forked from one sequence (request::n_forks / fork_of: the prompt
// computed once, its KV blocks shared) against the same choices as independent requests (the path before forks:
// each its own sequence, sharing the prompt's whole blocks through the prefix cache and computing the last partial
// block itself). Prints, per run, the prompt positions the model computed (the scheduler's n_prefill_tokens) and the
// time from submit to the last choice's end, with the model's default config; the runs alternate, each with a prompt
// of its own so that no run finds another's prompt in the prefix cache.
//
//   bench_fork_choices MODEL.gguf [--prompt 512] [--n 4] [--tokens 16] [--reps 3] [--threads 0]
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine/engine.h"
#include "actors/engine/engine_from_model.h"
#include "actors/engine/engine_params_from.h"
#include "core/loader/model_loader.h"
#include "core/log/log.h"

namespace {

struct options {
    std::string model;
    int prompt = 512;
    int n = 4;
    int tokens = 16;
    int reps = 3;
    int threads = 0;
};

struct run_result {
    int64_t prefill_tokens = 0;
    double last_ms = 0;
    int64_t forks = 0;
};

run_result run_once(troupe::engine& eng, const std::vector<int32_t>& prompt, const options& o, bool fork) {
    using namespace troupe;
    const engine_snapshot before = eng.snapshot();
    std::mutex m;
    std::condition_variable cv;
    int n_done = 0;
    std::string error;
    const auto t0 = steady_clock::now();
    request_id first = 0;
    for (int j = 0; j < o.n; ++j) {
        request r;
        r.prompt_ids = prompt;
        r.sampling.temperature = 0.8f;
        r.sampling.seed = 1234 + static_cast<uint64_t>(j);
        r.sampling.max_tokens = o.tokens;
        r.sampling.ignore_eos = true;
        if (fork) {
            r.n_forks = j == 0 ? o.n - 1 : 0;
            r.fork_of = first;
        }
        request_sink sink;
        sink.on_text = [](std::string_view) {};
        sink.on_done = [&](finish_reason, const usage&, const timings&) {
            std::lock_guard lock(m);
            n_done++;
            cv.notify_all();
        };
        sink.on_error = [&](const std::string& what) {
            std::lock_guard lock(m);
            error = what;
            n_done++;
            cv.notify_all();
        };
        auto id = eng.submit(std::move(r), std::move(sink));
        if (!id.ok()) {
            std::fprintf(stderr, "submit: %s\n", id.message().c_str());
            std::exit(1);
        }
        if (j == 0) first = *id;
    }
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return n_done == o.n; });
    run_result r;
    r.last_ms = ms_between(t0, steady_clock::now());
    if (!error.empty()) {
        std::fprintf(stderr, "a choice failed: %s\n", error.c_str());
        std::exit(1);
    }
    lock.unlock();
    // The counters are published with the scheduler's next output: give it a moment after the last delivery.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const engine_snapshot after = eng.snapshot();
    r.prefill_tokens = after.steps.n_prefill_tokens - before.steps.n_prefill_tokens;
    r.forks = after.steps.n_forks - before.steps.n_forks;
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace troupe;
    options o;
    for (int i = 1; i < argc; ++i) {
        auto next = [&](int& v) {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", argv[i]);
                std::exit(2);
            }
            v = std::atoi(argv[++i]);
        };
        if (!std::strcmp(argv[i], "--prompt")) {
            next(o.prompt);
        } else if (!std::strcmp(argv[i], "--n")) {
            next(o.n);
        } else if (!std::strcmp(argv[i], "--tokens")) {
            next(o.tokens);
        } else if (!std::strcmp(argv[i], "--reps")) {
            next(o.reps);
        } else if (!std::strcmp(argv[i], "--threads")) {
            next(o.threads);
        } else if (argv[i][0] != '-' && o.model.empty()) {
            o.model = argv[i];
        } else {
            std::fprintf(stderr, "usage: bench_fork_choices MODEL.gguf [--prompt N] [--n N] [--tokens N] [--reps N]\n");
            return 2;
        }
    }
    if (o.model.empty() || o.n < 2 || o.prompt < 2) {
        std::fprintf(stderr, "usage: bench_fork_choices MODEL.gguf [--prompt N] [--n N>=2] [--tokens N] [--reps N]\n");
        return 2;
    }
    set_log_level(log_level::warn);
    engine_config config;
    config.model = o.model;
    config.threads = o.threads;
    auto model = load_model(config);
    if (!model.ok()) {
        std::fprintf(stderr, "%s\n", model.message().c_str());
        return 1;
    }
    if (o.prompt + o.tokens >= model->runner->n_ctx()) {
        std::fprintf(stderr, "a %d-token prompt and %d tokens do not fit the context of %d\n", o.prompt, o.tokens,
                     model->runner->n_ctx());
        return 1;
    }
    // Prompts: consecutive token ids of the stories text (the tokenizer's ids are what the model reads); each run
    // starts at its own offset.
    std::vector<int32_t> text;
    for (const char* path : {"../shared/text/stories.txt", "../../shared/text/stories.txt"}) {
        std::ifstream in(path);
        if (!in) continue;
        std::stringstream ss;
        ss << in.rdbuf();
        text = model->tok->encode(ss.str(), false);
        break;
    }
    if (static_cast<int>(text.size()) < o.prompt + 2 * o.reps * 97) {
        std::fprintf(stderr, "needs ../shared/text/stories.txt (from the build or source folder)\n");
        return 1;
    }
    engine_params params = engine_params_from(config);
    const std::string kv = model->kv_summary;
    engine eng(engine_parts_from(*model, params), params);
    if (status st = eng.start(); !st.ok()) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        return 1;
    }
    std::printf("%s\n%s\n", eng.description().c_str(), kv.c_str());
    std::printf("n = %d choices of a %d-token prompt, %d tokens each (temperature 0.8, seeds 1234 + choice)\n", o.n,
                o.prompt, o.tokens);
    std::printf("%-26s %16s %8s %18s\n", "run", "prefill tokens", "forks", "last choice (ms)");
    std::vector<double> ms[2];
    for (int rep = 0; rep < o.reps; ++rep) {
        for (int fork = 0; fork < 2; ++fork) {
            const size_t at = static_cast<size_t>((2 * rep + fork) * 97);
            std::vector<int32_t> prompt{model->tok->bos_id()};
            prompt.insert(prompt.end(), text.begin() + static_cast<std::ptrdiff_t>(at),
                          text.begin() + static_cast<std::ptrdiff_t>(at) + o.prompt - 1);
            const run_result r = run_once(eng, prompt, o, fork != 0);
            ms[fork].push_back(r.last_ms);
            std::printf("%-26s %16lld %8lld %18.1f\n", fork ? "forked (one sequence)" : "independent (prefix cache)",
                        static_cast<long long>(r.prefill_tokens), static_cast<long long>(r.forks), r.last_ms);
        }
    }
    for (auto& v : ms) std::sort(v.begin(), v.end());
    const double before = ms[0][ms[0].size() / 2], after = ms[1][ms[1].size() / 2];
    std::printf("median time to the last choice: independent %.1f ms, forked %.1f ms (%.2fx)\n", before, after,
                before / after);
    (void)eng.stop(std::chrono::seconds(5));
    return 0;
}
