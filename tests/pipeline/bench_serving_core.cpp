// bench_serving_core: the serving figures of issue 3, printed (not a test).
//
//   1. KV waste: the scheduler on a mixed-length workload with a fake executor; KV positions allocated
//      but not holding data, paged blocks against a contiguous per-request reservation of
//      prompt + max_tokens (goal: paged < 5%).
//   2. Prefix cache: requests sharing a long system prompt on the real model, prefix caching on and
//      off: hit rate (goal > 90%) and TTFT.
//   3. Batching: aggregate decode throughput of 16 concurrent streams against one stream (goal >= 4x).
//   4. Continuous vs static batching on a mixed-length workload (most answers short, a few long):
//      throughput and p99 TTFT (goal: continuous >= 2x at no worse p99 TTFT).
//
// bench_serving_core [--model M.gguf] [--threads N] [--requests N]   (default model: stories260K)
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/engine/engine.h"
#include "actors/engine/engine_params_from.h"
#include "actors/scheduler/scheduler_kv_loop.h"
#include "actors/tokenizer/tokenizer_codec.h"
#include "core/loader/model_loader.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

// ---- 1. KV waste ------------------------------------------------------------------------------------

struct waste_figures {
    double paged = 0;       // (allocated - used) / allocated, summed over steps
    double contiguous = 0;  // the same with prompt + max_tokens reserved per request
    int64_t n_steps = 0;
    int64_t n_preemptions = 0;
};

waste_figures kv_waste(int32_t n_requests, uint64_t seed) {
    scheduler_params c;
    c.max_waiting = n_requests + 1;
    c.max_running = 32;
    c.max_batched_tokens = 512;
    c.n_ctx = 2048;
    c.eog_ids = {2};
    c.kv = {16, 4096};  // 65536 positions
    c.prefix_caching = false;
    scheduler_kv_loop s(c);
    std::mt19937_64 rng(seed);
    struct job {
        int32_t n_prompt, max_tokens, n_answer;
    };
    std::unordered_map<request_id, job> jobs;
    std::unordered_map<request_id, int32_t> produced;
    scheduler_output out;
    for (request_id id = 1; id <= n_requests; ++id) {
        job j;
        j.n_prompt = std::uniform_int_distribution<int32_t>(16, 1024)(rng);
        j.max_tokens = std::uniform_int_distribution<int32_t>(64, 512)(rng);
        j.n_answer = std::uniform_int_distribution<int32_t>(1, j.max_tokens)(rng);  // ends with EOS here
        jobs[id] = j;
        sampling_params p;
        p.max_tokens = j.max_tokens;
        std::vector<int32_t> prompt(j.n_prompt);
        for (auto& t : prompt) t = std::uniform_int_distribution<int32_t>(3, 30000)(rng);
        s.enqueue({id, std::make_shared<const std::vector<int32_t>>(std::move(prompt)),
                   std::make_shared<const sampling_params>(p), steady_clock::now()},
                  out);
    }
    waste_figures f;
    double alloc_paged = 0, alloc_contig = 0, used = 0;
    while (out.step) {
        const step_plan plan = *out.step;
        step_done d;
        d.step_id = plan.step_id;
        for (const auto& q : plan.seqs) {
            const job& j = jobs[q.seq_id];
            const double u = q.pos0 + static_cast<double>(q.tokens.size());
            used += u;
            alloc_paged += static_cast<double>(q.block_table->size()) * c.kv.block_size;
            alloc_contig += j.n_prompt + j.max_tokens;
            sequence_result r;
            r.seq_id = q.seq_id;
            if (q.sample) {
                int32_t& n = produced[q.seq_id];
                n++;
                r.tokens = {n >= j.n_answer ? 2 : 100};
            }
            d.results.push_back(r);
        }
        f.n_steps++;
        out.clear();
        s.step_finished(d, out);
    }
    f.paged = (alloc_paged - used) / alloc_paged;
    f.contiguous = (alloc_contig - used) / alloc_contig;
    f.n_preemptions = s.counters().n_preemptions;
    return f;
}

// ---- real-model runs -----------------------------------------------------------------------------

struct outcome {
    double ttft_ms = 0;
    int32_t n_tokens = 0;
    std::string error;
};

struct run_figures {
    double wall_s = 0;
    double tokens_per_s = 0;  // generated tokens / wall
    double ttft_p50 = 0, ttft_p99 = 0;
    engine_snapshot snap;
};

struct workload_item {
    std::string prompt;
    int32_t max_tokens;
};

// Throughput figures vary with other work on a shared machine: each figure is the best of k_rounds
// interleaved runs.
constexpr int k_rounds = 2;

run_figures best_of(const run_figures& a, const run_figures& b) {
    return a.tokens_per_s >= b.tokens_per_s ? a : b;
}

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

run_figures run_workload(const std::shared_ptr<model_runner>& runner, const std::shared_ptr<const text_codec>& codec,
                         engine_params params, const std::vector<workload_item>& work) {
    engine eng(engine_parts{runner, codec, {}}, params);
    (void)eng.start();
    std::mutex mutex;
    std::condition_variable cv;
    size_t n_done = 0;
    std::vector<outcome> outs(work.size());
    const auto t0 = steady_clock::now();
    for (size_t i = 0; i < work.size(); ++i) {
        sampling_params p;
        p.temperature = 0;
        p.max_tokens = work[i].max_tokens;
        p.ignore_eos = true;
        request_sink sink;
        sink.on_done = [&, i](finish_reason, const usage& u, const timings& t) {
            std::lock_guard lock(mutex);
            outs[i].ttft_ms = t.time_to_first_token_ms;
            outs[i].n_tokens = u.n_completion_tokens;
            n_done++;
            cv.notify_all();
        };
        sink.on_error = [&, i](const std::string& m) {
            std::lock_guard lock(mutex);
            outs[i].error = m;
            n_done++;
            cv.notify_all();
        };
        auto id = eng.submit(request{work[i].prompt, p, std::nullopt}, sink);
        if (!id.ok()) std::fprintf(stderr, "submit failed: %s\n", id.message().c_str());
    }
    {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return n_done == work.size(); });
    }
    run_figures f;
    f.wall_s = std::chrono::duration<double>(steady_clock::now() - t0).count();
    f.snap = eng.snapshot();
    (void)eng.stop(std::chrono::milliseconds(1000));
    std::vector<double> ttft;
    int64_t n_tokens = 0;
    for (const auto& o : outs) {
        if (!o.error.empty()) std::fprintf(stderr, "request failed: %s\n", o.error.c_str());
        ttft.push_back(o.ttft_ms);
        n_tokens += o.n_tokens;
    }
    f.tokens_per_s = static_cast<double>(n_tokens) / f.wall_s;
    f.ttft_p50 = percentile(ttft, 0.5);
    f.ttft_p99 = percentile(ttft, 0.99);
    return f;
}

// The model's own batching gain, the limit for figure 3: the time of one forward of n decode tokens (one
// per sequence, each at position 64 of its own blocks), best of a few. Run before any engine uses the runner.
double decode_step_ms(model_runner& runner, int32_t n_seqs) {
    const int32_t bs = runner.kv().block_size;
    const int32_t per_seq = (65 + bs - 1) / bs;
    forward_batch batch;
    for (int32_t s = 0; s < n_seqs; ++s) {
        sequence_step q{};
        q.seq_id = s;
        q.tokens = {100 + s};
        q.pos0 = 64;
        for (int32_t b = 0; b < per_seq; ++b) q.block_table.push_back(s * per_seq + b);
        batch.seqs.push_back(q);
    }
    forward_output out;
    double best = 1e30;
    for (int rep = 0; rep < 7; ++rep) {
        const auto t0 = steady_clock::now();
        if (!runner.forward(batch, out).ok()) return 0;
        best = std::min(best, std::chrono::duration<double, std::milli>(steady_clock::now() - t0).count());
    }
    return best;
}

std::vector<std::string> read_lines(const std::string& path) {
    std::vector<std::string> lines;
    std::ifstream in(path);
    for (std::string l; std::getline(in, l);)
        if (!l.empty()) lines.push_back(l);
    return lines;
}

int main_impl(int argc, char** argv) {
    std::string model_path;
    int32_t threads = 0;
    int32_t n_requests = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--model")) model_path = argv[i + 1];
        if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--requests")) n_requests = std::atoi(argv[i + 1]);
    }
    set_log_level(log_level::warn);

    std::printf(
        "== 1. KV waste: 400 requests, prompts 16-1024 tokens, max_tokens 64-512, answers 1..max_tokens,\n"
        "      block 16, 32 running, budget 512 tokens/step (scheduler + fake executor)\n");
    const waste_figures w = kv_waste(400, 11);
    std::printf("   paged blocks: %.2f%% of allocated KV unused (goal < 5%%: %s)\n", 100 * w.paged,
                w.paged < 0.05 ? "met" : "NOT met");
    std::printf("   contiguous prompt+max_tokens reservation: %.2f%% unused  (%.1fx the paged waste)\n",
                100 * w.contiguous, w.contiguous / std::max(w.paged, 1e-9));
    std::printf("   %lld steps, %lld preemptions\n\n", static_cast<long long>(w.n_steps),
                static_cast<long long>(w.n_preemptions));

    engine_config config;
    if (!model_path.empty()) config.model = model_path;
    config.threads = threads;
    config.scheduler.max_running_seqs = 16;
    auto m = load_model(config);
    if (!m.ok()) {
        std::fprintf(stderr, "bench_serving_core: %s\n", m.message().c_str());
        return 1;
    }
    std::shared_ptr<model_runner> runner(std::move(m->runner));
    auto codec = make_tokenizer_codec(m->tok);
    std::printf("model: %s\nKV pool: %d blocks of %d\n\n", runner->description().c_str(), runner->kv().n_blocks,
                runner->kv().block_size);
    auto prompts_file = testing::shared_file("text/prompts.txt");
    auto stories_file = testing::shared_file("text/stories.txt");
    if (!prompts_file || !stories_file) {
        std::fprintf(stderr, "bench_serving_core: needs ../shared/text/prompts.txt and stories.txt\n");
        return 1;
    }
    const double step1 = decode_step_ms(*runner, 1);
    const double step16 = decode_step_ms(*runner, 16);
    const double model_gain = 16 * step1 / step16;
    std::printf(
        "model forward, decode step: 1 sequence %.2f ms, 16 sequences %.2f ms -> the model itself gives at most "
        "%.2fx tokens/s with 16 streams\n\n",
        step1, step16, model_gain);
    const auto prompts = read_lines(*prompts_file);
    const auto stories = read_lines(*stories_file);
    const engine_params base = engine_params_from(config);

    // ---- 2. prefix cache ----
    {
        std::string system;
        for (size_t i = 0; system.size() < 1200 && i < stories.size(); ++i) system += stories[i] + "\n";
        std::vector<workload_item> work;
        for (int32_t i = 0; i < 32; ++i) work.push_back({system + prompts[i % prompts.size()], 16});
        std::printf(
            "== 2. prefix cache: 32 requests = one %zu-character shared prompt + their own line, 16 tokens each\n",
            system.size());
        engine_params p = base;
        p.prefix_caching = false;
        const run_figures off = run_workload(runner, codec, p, work);
        p.prefix_caching = true;
        const run_figures on = run_workload(runner, codec, p, work);
        std::printf(
            "   prefix caching on:  hit rate %.1f%% (%lld of %lld prompt blocks; goal > 90%%: %s), TTFT p50 %.1f ms, "
            "p99 %.1f ms, %.2f s\n",
            100 * on.snap.kv.prefix_hit_rate, static_cast<long long>(on.snap.kv.n_prefix_hits),
            static_cast<long long>(on.snap.kv.n_prefix_queries), on.snap.kv.prefix_hit_rate > 0.9 ? "met" : "NOT met",
            on.ttft_p50, on.ttft_p99, on.wall_s);
        std::printf("   prefix caching off: TTFT p50 %.1f ms, p99 %.1f ms, %.2f s  (on: TTFT p50 %.2fx lower)\n\n",
                    off.ttft_p50, off.ttft_p99, off.wall_s, off.ttft_p50 / std::max(on.ttft_p50, 1e-9));
    }

    // ---- 3. 16 streams vs 1 ----
    {
        std::printf("== 3. decode throughput: 16 concurrent streams against one (128 tokens each)\n");
        engine_params p = base;
        p.prefix_caching = false;
        std::vector<workload_item> work;
        for (int32_t i = 0; i < 16; ++i) work.push_back({prompts[i], 128});
        run_figures one, many;
        for (int round = 0; round < k_rounds; ++round) {  // interleaved, best of rounds (a shared machine)
            one = best_of(one, run_workload(runner, codec, p, {{prompts[0], 128}}));
            many = best_of(many, run_workload(runner, codec, p, work));
        }
        const double ratio = many.tokens_per_s / one.tokens_per_s;
        std::printf(
            "   1 stream: %.1f tokens/s; 16 streams: %.1f tokens/s aggregate = %.2fx (goal >= 4x: %s); the model's "
            "limit here is %.2fx, the engine reaches %.0f%% of it\n\n",
            one.tokens_per_s, many.tokens_per_s, ratio, ratio >= 4 ? "met" : "NOT met", model_gain,
            100 * ratio / model_gain);
    }

    // ---- 4. continuous vs static ----
    {
        std::mt19937_64 rng(5);
        std::vector<workload_item> work;
        for (int32_t i = 0; i < n_requests; ++i) {
            const bool long_answer = std::uniform_real_distribution<double>(0, 1)(rng) < 0.2;
            const int32_t n = long_answer ? std::uniform_int_distribution<int32_t>(128, 256)(rng)
                                          : std::uniform_int_distribution<int32_t>(8, 32)(rng);
            std::string prompt = prompts[i % prompts.size()];
            if (i % 3 == 0) prompt = stories[i % stories.size()].substr(0, 600);  // some long prompts
            work.push_back({prompt, n});
        }
        std::printf(
            "== 4. continuous vs static batching: %d requests arriving together, 80%% answers of 8-32 tokens, "
            "20%% of 128-256; 16 running\n",
            n_requests);
        engine_params p = base;
        p.prefix_caching = false;
        run_figures st, co;
        for (int round = 0; round < k_rounds; ++round) {
            p.policy = batching_policy::static_batch;
            st = best_of(st, run_workload(runner, codec, p, work));
            p.policy = batching_policy::continuous;
            co = best_of(co, run_workload(runner, codec, p, work));
        }
        const double ratio = co.tokens_per_s / st.tokens_per_s;
        std::printf(
            "   static:     %.1f tokens/s, %.2f s, TTFT p50 %.0f ms, p99 %.0f ms, %lld steps, mean batch %.1f\n",
            st.tokens_per_s, st.wall_s, st.ttft_p50, st.ttft_p99, static_cast<long long>(st.snap.steps.n_steps),
            st.snap.steps.mean_batch_size);
        std::printf(
            "   continuous: %.1f tokens/s, %.2f s, TTFT p50 %.0f ms, p99 %.0f ms, %lld steps, mean batch %.1f\n",
            co.tokens_per_s, co.wall_s, co.ttft_p50, co.ttft_p99, static_cast<long long>(co.snap.steps.n_steps),
            co.snap.steps.mean_batch_size);
        std::printf(
            "   steps for the same tokens: static / continuous = %.2fx (what the policy saves; wall-clock gains "
            "follow where a bigger batch costs little more per step)\n",
            static_cast<double>(st.snap.steps.n_steps) / std::max<int64_t>(1, co.snap.steps.n_steps));
        std::printf(
            "   continuous / static throughput = %.2fx with p99 TTFT %s (goal >= 2x at no worse p99 TTFT: %s)\n", ratio,
            co.ttft_p99 <= st.ttft_p99 ? "no worse" : "WORSE",
            ratio >= 2 && co.ttft_p99 <= st.ttft_p99 ? "met" : "NOT met");
    }
    return 0;
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
    return troupe::main_impl(argc, argv);
}
