#include "cli/bench_spec/spec_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "actors/executor/executor_core.h"
#include "cli/bench_spec/spec_figures.h"
#include "core/loader/model_loader.h"
#include "core/log/log.h"
#include "core/model/cpu_llama.h"
#include "kernels/cpu/limits.h"

namespace troupe::bench {
namespace {

using bench_clock = std::chrono::steady_clock;

// One prompt's generation through an executor: a prefill step that samples the first token, then decode steps
// (drafting up to max_draft nodes each when the executor has a speculator) until n_gen tokens. The decode steps
// are recorded and timed; the prefill is not.
struct generation {
    executor_core& exec;
    std::shared_ptr<const std::vector<int32_t>> block_table;
    std::shared_ptr<const sampling_params> params;
    int32_t n_gen = 0;
    int32_t max_draft = 0;

    status run(int64_t seq_id, const std::vector<int32_t>& prompt, spec_run& out, std::vector<int32_t>& tokens) {
        tokens.clear();
        step_plan plan;
        plan.step_id = 1;
        step_sequence& q = plan.seqs.emplace_back();
        q.seq_id = seq_id;
        q.tokens = prompt;
        q.pos0 = 0;
        q.block_table = block_table;
        q.params = params;
        step_done done = exec.run(plan);
        if (!done.error.empty()) return make_error(done.error);
        tokens = done.results[0].tokens;
        int32_t pos = static_cast<int32_t>(prompt.size());
        const auto t0 = bench_clock::now();
        while (static_cast<int32_t>(tokens.size()) < n_gen) {
            plan.step_id++;
            q.tokens.assign(1, tokens.back());
            q.pos0 = pos;
            q.max_draft = std::min(max_draft, n_gen - static_cast<int32_t>(tokens.size()) - 1);
            done = exec.run(plan);
            if (!done.error.empty()) return make_error(done.error);
            const sequence_result& r = done.results[0];
            tokens.insert(tokens.end(), r.tokens.begin(), r.tokens.end());
            pos += 1 + r.n_accepted;
            out.steps.push_back({static_cast<int32_t>(r.tokens.size()), r.n_drafted, r.n_draft_nodes, r.n_accepted,
                                 done.propose_s, done.forward_s, done.step_s});
        }
        out.wall_s += std::chrono::duration<double>(bench_clock::now() - t0).count();
        exec.retire({seq_id});
        return {};
    }
};

std::string ms(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
    return buf;
}

void print_figures(const spec_figures& f, const std::string& plugin, double bound_tps, const cpu_llama* cpu,
                   double bandwidth) {
    std::printf("%-14s %12s %14s  %s\n", "", "tokens/s", "ms per step", "limit measured in this run");
    auto row = [&](const char* name, double tps, double step_s, double tokens_per_step) {
        std::printf("%-14s %12.1f %14.3f", name, tps, step_s * 1e3);
        if (bound_tps > 0) {
            // Each target step reads the weights once and yields tokens_per_step tokens.
            const double bound = bound_tps * tokens_per_step;
            std::printf("  %5.1f%% of the bandwidth bound %.1f tokens/s (%.2f tokens per weight read)",
                        100 * tps / bound, bound, tokens_per_step);
        }
        std::printf("\n");
    };
    row("plain", f.tokens_per_s_plain, f.step_plain_s, 1.0);
    row(plugin.c_str(), f.tokens_per_s_spec, f.step_spec_s, f.tau);
    if (cpu != nullptr && bound_tps > 0) {
        std::printf("%-14s %.1f MB of weights per target step, %.1f GB/s read bandwidth\n", "",
                    static_cast<double>(cpu->weight_bytes_per_token()) / 1e6, bandwidth);
    }
    std::printf(
        "speed-up       %.2fx measured; predicted %.2fx = tau / (1 + c_draft + c_verify); ideal %.2fx = tau / "
        "(1 + c_draft)\n",
        f.speedup, f.predicted, f.ideal);
    std::printf("efficiency     %.1f%% = measured / predicted (%.1f%% of the ideal)\n", 100 * f.efficiency,
                f.ideal > 0 ? 100 * f.speedup / f.ideal : 0.0);
    std::printf("acceptance     tau = %.3f tokens per target step; proposals %.2f deep, %.2f nodes on average\n", f.tau,
                f.mean_depth, f.mean_nodes);
    std::printf("per position   P(accepted path reaches k | drafted to depth k):");
    for (size_t k = 0; k < f.accept_at.size(); ++k) {
        std::printf(" %zu:%.2f(n=%lld)", k + 1, f.accept_at[k], static_cast<long long>(f.n_at[k]));
    }
    std::printf("\n");
    std::printf(
        "costs          target step T = %s (forward %s); propose %s per step: c_draft = %.3f; forward with "
        "the nodes %s: c_verify = %.3f; speculative step %s\n",
        ms(f.step_plain_s).c_str(), ms(f.forward_plain_s).c_str(), ms(f.propose_s).c_str(), f.c_draft,
        ms(f.forward_spec_s).c_str(), f.c_verify, ms(f.step_spec_s).c_str());
}

}  // namespace

int run_spec_bench(const engine_config& config, const spec_bench_options& o) {
    set_log_level(config.log_level);
    auto model = load_model(config);
    if (!model) {
        std::fprintf(stderr, "troupe bench: %s\n", model.message().c_str());
        return 1;
    }
    if (!model->spec) {
        std::fprintf(stderr, "troupe bench: no spec plugin loaded (plugins.spec.name is none)\n");
        return 2;
    }
    cpu_llama* cpu = model->cpu;
    std::shared_ptr<speculator> spec = model->spec;
    const std::string plugin = spec->name();
    std::shared_ptr<model_runner> runner(std::move(model->runner));
    const int32_t max_draft = spec->max_nodes();

    std::vector<std::vector<int32_t>> prompts;
    size_t longest = 0;
    for (const auto& text : o.prompts) {
        prompts.push_back(model->tok->encode(text, true));
        longest = std::max(longest, prompts.back().size());
    }
    const kv_geometry kv = runner->kv();
    const int32_t n_needed = static_cast<int32_t>(longest) + o.n_gen + max_draft + 1;
    if (n_needed > runner->n_ctx()) {
        std::fprintf(stderr,
                     "troupe bench: a prompt of %zu tokens, %d generated and %d draft nodes exceed the context of %d\n",
                     longest, o.n_gen, max_draft, runner->n_ctx());
        return 2;
    }
    const int32_t n_blocks = (n_needed + kv.block_size - 1) / kv.block_size;
    if (n_blocks > kv.n_blocks) {
        std::fprintf(stderr,
                     "troupe bench: one sequence of %d tokens needs %d KV blocks, the pool has %d (raise kv.memory)\n",
                     n_needed, n_blocks, kv.n_blocks);
        return 2;
    }
    auto table = std::make_shared<std::vector<int32_t>>();
    for (int32_t i = 0; i < n_blocks; ++i) table->push_back(i);
    sampling_params sp = config.sampling;
    sp.temperature = o.temperature;
    sp.ignore_eos = true;
    sp.max_tokens = o.n_gen;
    auto params = std::make_shared<const sampling_params>(sp);

    std::printf("model: %s\n", runner->description().c_str());
    std::printf("plugins:");
    for (const auto& p : model->plugins) std::printf(" %s", p.c_str());
    std::printf(
        "\nspeculation: %s, up to %d draft nodes per step; batch 1, %zu prompts x %d tokens, %s; best of %d reps\n",
        plugin.c_str(), max_draft, prompts.size(), o.n_gen,
        o.temperature > 0 ? ("temperature " + std::to_string(o.temperature)).c_str() : "greedy", o.reps);

    executor_core plain_exec(runner);
    executor_core spec_exec(runner, spec);
    generation plain{plain_exec, table, params, o.n_gen, 0};
    generation drafting{spec_exec, table, params, o.n_gen, max_draft};
    spec_run best_plain, best_spec;
    double bandwidth = 0;
    int64_t n_differ = 0;
    std::string first_difference;
    std::vector<int32_t> plain_tokens, spec_tokens;
    for (int32_t r = 0; r < o.reps; ++r) {
        if (cpu) bandwidth = std::max(bandwidth, cpu::measure_read_bandwidth(cpu->pool()));
        spec_run p, s;
        for (size_t i = 0; i < prompts.size(); ++i) {
            const auto seq = static_cast<int64_t>(2 * i + 1);
            if (status st = plain.run(seq, prompts[i], p, plain_tokens); !st.ok()) {
                std::fprintf(stderr, "troupe bench: %s\n", st.message().c_str());
                return 1;
            }
            if (status st = drafting.run(seq + 1, prompts[i], s, spec_tokens); !st.ok()) {
                std::fprintf(stderr, "troupe bench: %s: %s\n", plugin.c_str(), st.message().c_str());
                return 1;
            }
            if (r == 0 && o.temperature <= 0 && plain_tokens != spec_tokens) {
                if (n_differ++ == 0) {
                    size_t k = 0;
                    while (k < plain_tokens.size() && k < spec_tokens.size() && plain_tokens[k] == spec_tokens[k]) ++k;
                    first_difference = "prompt " + std::to_string(i + 1) + " at token " + std::to_string(k);
                }
            }
        }
        if (best_plain.steps.empty() || p.tokens_per_s() > best_plain.tokens_per_s()) best_plain = std::move(p);
        if (best_spec.steps.empty() || s.tokens_per_s() > best_spec.tokens_per_s()) best_spec = std::move(s);
    }
    if (cpu) bandwidth = std::max(bandwidth, cpu::measure_read_bandwidth(cpu->pool()));
    const spec_figures f = compute_spec_figures(best_plain, best_spec);
    const double bound_tps =
        cpu ? bandwidth * 1e9 / static_cast<double>(std::max<size_t>(1, cpu->weight_bytes_per_token())) : 0;
    print_figures(f, plugin, bound_tps, cpu, bandwidth);
    if (o.temperature <= 0) {
        if (n_differ == 0) {
            std::printf("greedy output  identical with and without %s on all %zu prompts\n", plugin.c_str(),
                        prompts.size());
        } else {
            std::printf("greedy output  DIFFERS on %lld of %zu prompts (first: %s)\n", static_cast<long long>(n_differ),
                        prompts.size(), first_difference.c_str());
            return 1;
        }
    }
    return 0;
}

}  // namespace troupe::bench
