// troupe bench --model M.gguf: prompt-processing and generation throughput.
//
// Structure like cmd_run.cpp: bench_spec() declares the flags, prepare_bench() validates them into
// bench_inputs, bench_command() runs the measurement like llama-bench: pp (one forward over n_prompt
// tokens per sequence) and tg (n_gen decode steps), tokens/s as the best of reps, each printed beside
// the limit measured in the same run: decode against memory read bandwidth (weight bytes per token ÷
// bandwidth gives the bound), prefill against the peak of the arithmetic it uses (2 operations per weight
// multiply-add): the int8 dot-product peak for the products the builtin kernels compute in int8 (the quantized
// recipe with Q8_0 / Q4_0 / Q4_K / Q6_K weights), the FMA peak for the float ones; a model with both is set against
// the time the two peaks allow its mix.
// With a spec plugin (--spec NAME, or plugins.spec in the config) it measures speculative decoding instead:
// batch-1 generation over real prompts with and without the plugin (cli/bench_spec/spec_bench.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>

#include "cli/bench_spec/spec_bench.h"

#include "core/backend/cuda_runner.h"
#include "core/loader/model_loader.h"
#include "core/model/cpu_llama.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/limits.h"

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/config/engine_config.h"

namespace troupe::cli {
namespace {

struct bench_inputs {
    engine_config config;
    int32_t n_prompt = 512;            // prompt tokens per sequence (prefill figure, llama-bench's pp512)
    int32_t n_gen = 128;               // generated tokens per sequence (decode figure)
    int32_t n_seqs = 1;                // sequences decoded together
    int32_t reps = 3;                  // repetitions; the best is reported (beside the median)
    bool decode_after_prompt = false;  // decode at context n_prompt.. (after the prefill) rather than from 0
    int32_t compare_depth = 0;         // with decode_after_prompt: also decode at this context, step for step
    bench::spec_bench_options spec;    // with a spec plugin
};

// --prompt TEXT (repeatable), else --prompts FILE (one per line), else ../shared/text/prompts.txt beside the
// source tree; the first --n-prompts of them.
result<std::vector<std::string>> spec_prompts(const cli_args& args, int32_t n_prompts) {
    std::vector<std::string> prompts = args.all("--prompt");
    for (auto& p : prompts) p = unescape(p);
    if (prompts.empty()) {
        const std::string path = args.value_or(
            "--prompts",
            (std::filesystem::path(TROUPE_SOURCE_DIR) / ".." / "shared" / "text" / "prompts.txt").string());
        std::ifstream in(path);
        if (!in)
            return make_error("--prompts: cannot read " + path +
                              " (name a file of prompts, one per line, or --prompt TEXT)");
        for (std::string line; std::getline(in, line);) {
            if (!line.empty()) prompts.push_back(line);
        }
        if (prompts.empty()) return make_error("--prompts: " + path + " has no prompts");
    }
    if (static_cast<int32_t>(prompts.size()) > n_prompts) prompts.resize(static_cast<size_t>(n_prompts));
    return prompts;
}

result<int32_t> positive(const cli_args& args, std::string_view flag, int32_t fallback) {
    auto v = args.value(flag);
    if (!v) return fallback;
    auto n = parse_int_flag(flag, *v);
    if (!n) return n.err();
    if (*n < 1 || *n > 1000000) return make_error(std::string(flag) + ": must be between 1 and 1000000, got " + *v);
    return static_cast<int32_t>(*n);
}

result<bench_inputs> prepare_bench(const cli_args& args) {
    std::vector<std::string> problems;
    bench_inputs in;
    // --spec NAME is plugins.spec.name, ahead of the other flags so that --set can still change it.
    result<engine_config> config = make_error("");
    if (auto overrides = flag_overrides(args); !overrides) {
        config = overrides.err();
    } else {
        if (auto name = args.value("--spec"))
            overrides->insert(overrides->begin(), {"plugins.spec.name", *name, "--spec"});
        config = resolve_config(args.value_or("--config", ""), *overrides);
    }
    if (!config) problems.push_back(config.message());
    struct count_flag {
        std::string_view flag;
        int32_t* field;
    };
    for (const auto& f : {count_flag{"--n-prompt", &in.n_prompt}, count_flag{"--n-gen", &in.n_gen},
                          count_flag{"--n-seqs", &in.n_seqs}, count_flag{"--reps", &in.reps}}) {
        auto v = positive(args, f.flag, *f.field);
        if (!v)
            problems.push_back(v.message());
        else
            *f.field = *v;
    }
    if (!problems.empty()) {
        return make_error(join_problems(problems));
    }
    in.config = std::move(*config);
    in.decode_after_prompt = args.has("--decode-after-prompt");
    if (args.has("--compare-depth")) {
        auto depth = positive(args, "--compare-depth", 128);
        if (!depth) return depth.err();
        if (!in.decode_after_prompt || in.n_seqs != 1) {
            return make_error("--compare-depth: needs --decode-after-prompt and one sequence (--n-seqs 1)");
        }
        in.compare_depth = *depth;
    }
    in.spec.n_gen = in.n_gen;
    in.spec.reps = in.reps;
    if (in.config.plugins.spec.name != "none") {
        auto n_prompts = positive(args, "--n-prompts", 8);
        if (!n_prompts) return n_prompts.err();
        auto prompts = spec_prompts(args, *n_prompts);
        if (!prompts) return prompts.err();
        in.spec.prompts = std::move(*prompts);
        // Greedy unless --temperature says otherwise (the config's default temperature is for serving).
        in.spec.temperature = args.has("--temperature") ? in.config.sampling.temperature : 0.0f;
    }
    if (!args.has("--print-config")) {
        auto model = resolve_model_path(in.config);
        if (!model) return model.err();
        in.config.model = *model;
    }
    return in;
}

using bench_clock = std::chrono::steady_clock;

double seconds_since(bench_clock::time_point t0) {
    return std::chrono::duration<double>(bench_clock::now() - t0).count();
}

double best(const std::vector<double>& v) {
    return *std::max_element(v.begin(), v.end());
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// One timed phase: n_seqs sequences, each given `tokens` at pos0 (prefill) or one token per step (decode).
struct bench_run {
    model_runner& model;
    int32_t n_seqs;
    int32_t blocks_per_seq;

    forward_batch batch_at(int32_t pos0, const std::vector<std::vector<int32_t>>& tokens) const {
        forward_batch b;
        for (int32_t s = 0; s < n_seqs; ++s) {
            sequence_step st{s, tokens[s], pos0, {}, false};
            for (int32_t i = 0; i < blocks_per_seq; ++i) st.block_table.push_back(s * blocks_per_seq + i);
            b.seqs.push_back(std::move(st));
        }
        return b;
    }
};

// --compare-depth: a second sequence (id 1, its blocks after the first's) decoded at a shallow context, one step after
// each step of the deep one, so that both see the same moments of a shared machine; its prompt is a prefix of the
// deep one's.
struct shallow_run {
    model_runner& model;
    int32_t first_block;
    int32_t n_blocks;

    forward_batch batch_at(int32_t pos0, std::vector<int32_t> tokens) const {
        sequence_step st{1, std::move(tokens), pos0, {}, false};
        for (int32_t i = 0; i < n_blocks; ++i) st.block_table.push_back(first_block + i);
        forward_batch b;
        b.seqs.push_back(std::move(st));
        return b;
    }
};

int measure(const bench_inputs& in) {
    set_log_level(in.config.log_level);
    auto model = load_model(in.config);
    if (!model) {
        std::fprintf(stderr, "troupe bench: %s\n", model.message().c_str());
        return exit_failure;
    }
    model_runner& runner = *model->runner;
    const kv_geometry kv = runner.kv();
    const int32_t n_ctx_needed = in.decode_after_prompt ? in.n_prompt + in.n_gen : std::max(in.n_prompt, in.n_gen + 1);
    if (n_ctx_needed > runner.n_ctx()) {
        std::fprintf(stderr, "troupe bench: %d tokens per sequence exceed the model's context of %d\n", n_ctx_needed,
                     runner.n_ctx());
        return exit_usage;
    }
    const int32_t blocks_per_seq = (n_ctx_needed + kv.block_size - 1) / kv.block_size;
    const int32_t shallow_blocks =
        in.compare_depth > 0 ? (in.compare_depth + in.n_gen + kv.block_size - 1) / kv.block_size : 0;
    if (static_cast<int64_t>(blocks_per_seq) * in.n_seqs + shallow_blocks > kv.n_blocks) {
        std::fprintf(stderr,
                     "troupe bench: %d sequences of %d tokens need %d KV blocks, the pool has %d "
                     "(raise kv.memory or scheduler.max_running_seqs)\n",
                     in.n_seqs + (shallow_blocks > 0 ? 1 : 0), n_ctx_needed,
                     blocks_per_seq * in.n_seqs + shallow_blocks, kv.n_blocks);
        return exit_usage;
    }
    if (in.compare_depth >= in.n_prompt) {
        std::fprintf(stderr, "troupe bench: --compare-depth %d must be below --n-prompt %d\n", in.compare_depth,
                     in.n_prompt);
        return exit_usage;
    }
    std::printf("model: %s\n", runner.description().c_str());
    std::printf("plugins:");
    for (const auto& p : model->plugins) std::printf(" %s", p.c_str());
    std::printf("\n");

    bench_run run{runner, in.n_seqs, blocks_per_seq};
    const shallow_run shallow{runner, blocks_per_seq * in.n_seqs, shallow_blocks};
    std::vector<double> deep_share;  // --compare-depth: per rep, the deep decode's speed over the shallow one's
    double deep_best = 0, shallow_best = 0;
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> token(0, runner.n_vocab() - 1);
    std::vector<std::vector<int32_t>> prompt(in.n_seqs, std::vector<int32_t>(in.n_prompt));
    for (auto& p : prompt) {
        for (auto& t : p) t = token(rng);
    }
    forward_output out;
    std::vector<double> pp, tg, bandwidth_runs, fma_peak_runs, int8_peak_runs, nibble_peak_runs;
    cpu_llama* cpu = model->cpu;
    // The limits are measured between the phases of every rep, so a busy moment on a shared machine
    // lowers a figure and its limit alike; each is reported as the best of the reps (the bandwidth as the best
    // of the reads before and after every decode run).
    // Plain decode alternates its steps with reads of a step's weight bytes (step_read_stream), so the two see the
    // same moments of the machine; per rep the decode's speed as a share of the read's.
    std::unique_ptr<cpu::step_read_stream> read_stream;
    if (cpu && shallow_blocks == 0) read_stream = std::make_unique<cpu::step_read_stream>(cpu->pool());
    std::vector<double> stream_share, stream_gbs;
    const size_t step_bytes = cpu ? cpu->weight_bytes_per_token() : 0;  // what the read between steps reads
    for (int32_t r = 0; r < in.reps; ++r) {
        if (cpu) {
            fma_peak_runs.push_back(cpu::measure_fma_peak(cpu->pool()));
            int8_peak_runs.push_back(cpu::measure_int8_peak(cpu->pool()));
            if (cpu->int8_macs_per_token(true) > 0)
                nibble_peak_runs.push_back(cpu::measure_int8_nibble_peak(cpu->pool()));
        }
        const forward_batch prefill = run.batch_at(0, prompt);
        const auto t0 = bench_clock::now();
        if (auto st = runner.forward(prefill, out); !st) {
            std::fprintf(stderr, "troupe bench: %s\n", st.message().c_str());
            return exit_failure;
        }
        pp.push_back(static_cast<double>(in.n_prompt) * in.n_seqs / seconds_since(t0));
        if (cpu) bandwidth_runs.push_back(cpu::measure_read_bandwidth(cpu->pool()));

        if (shallow_blocks > 0) {
            const std::vector<int32_t> head(prompt[0].begin(), prompt[0].begin() + in.compare_depth);
            if (auto st = runner.forward(shallow.batch_at(0, head), out); !st) {
                std::fprintf(stderr, "troupe bench: %s\n", st.message().c_str());
                return exit_failure;
            }
            double deep_s = 0, shallow_s = 0;
            int32_t deep_next = 1, shallow_next = 1;
            const auto argmax = [&] {
                const auto row = out.row(0);
                return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
            };
            for (int32_t i = 0; i < in.n_gen; ++i) {
                auto t = bench_clock::now();
                auto st = runner.forward(run.batch_at(in.n_prompt + i, {{deep_next}}), out);
                deep_s += seconds_since(t);
                if (st) {
                    deep_next = argmax();
                    t = bench_clock::now();
                    st = runner.forward(shallow.batch_at(in.compare_depth + i, {shallow_next}), out);
                    shallow_s += seconds_since(t);
                    shallow_next = argmax();
                }
                if (!st) {
                    std::fprintf(stderr, "troupe bench: %s\n", st.message().c_str());
                    return exit_failure;
                }
            }
            deep_share.push_back(shallow_s / deep_s);
            deep_best = std::max(deep_best, in.n_gen / deep_s);
            shallow_best = std::max(shallow_best, in.n_gen / shallow_s);
            tg.push_back(in.n_gen / deep_s);  // the rep's decode figure: the deep decode's
            if (cpu) bandwidth_runs.push_back(cpu::measure_read_bandwidth(cpu->pool()));
            continue;
        }
        std::vector<std::vector<int32_t>> next(in.n_seqs, std::vector<int32_t>{1});
        double decode_s = 0, read_s = 0;
        for (int32_t i = 0; i < in.n_gen; ++i) {
            const auto t1 = bench_clock::now();
            if (auto st = runner.forward(run.batch_at(in.decode_after_prompt ? in.n_prompt + i : i, next), out); !st) {
                std::fprintf(stderr, "troupe bench: %s\n", st.message().c_str());
                return exit_failure;
            }
            decode_s += seconds_since(t1);
            if (read_stream) read_s += read_stream->read(step_bytes);
            for (int32_t s = 0; s < in.n_seqs; ++s) {
                const auto row = out.row(s);
                next[s][0] = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
            }
        }
        tg.push_back(static_cast<double>(in.n_gen) * in.n_seqs / decode_s);
        if (read_stream) {
            stream_share.push_back(read_s / decode_s);
            stream_gbs.push_back(static_cast<double>(step_bytes) * in.n_gen / read_s / 1e9);
        }
        // And after decode: the machine's bandwidth can change within a rep (another tenant), so the bound is
        // the best read on either side of every decode run.
        if (cpu) bandwidth_runs.push_back(cpu::measure_read_bandwidth(cpu->pool()));
    }
    const double pp_tps = best(pp), tg_tps = best(tg);

    std::printf("%-8s %12s %14s %s (best of %d reps; medians %.1f and %.1f tokens/s)\n", "test", "tokens/s", "",
                "limit measured in this run", in.reps, median(pp), median(tg));
    if (cpu) {
        const double bandwidth = best(bandwidth_runs);
        const double fma_peak = best(fma_peak_runs);
        const double int8_peak = best(int8_peak_runs);
        const double bytes_per_token = static_cast<double>(cpu->weight_bytes_per_token());
        // A decode step of n_seqs sequences reads the weights once.
        const double tg_bound = bandwidth * 1e9 / bytes_per_token * in.n_seqs;
        // Prefill computes the output matrix for each sequence's last token only: per prompt token, the layers' and
        // 1 / n_prompt of the output's.
        const auto prefill_macs = [&](int64_t with_output, int64_t without) {
            return static_cast<double>(without) + static_cast<double>(with_output - without) / in.n_prompt;
        };
        const double macs = prefill_macs(cpu->matmul_macs_per_token(), cpu->matmul_macs_per_token(false));
        const double int8_macs = prefill_macs(cpu->int8_macs_per_token(), cpu->int8_macs_per_token(false, false));
        const double nibble_macs = prefill_macs(cpu->int8_macs_per_token(true), cpu->int8_macs_per_token(true, false));
        const double nibble_peak = nibble_peak_runs.empty() ? 0.0 : best(nibble_peak_runs);
        const double float_macs = macs - int8_macs;
        const double gops = 2.0 * macs * pp_tps / 1e9;
        // Seconds per token at the peaks (int8 peak 0: no int8 arithmetic at this level, none counted as such); the
        // Q4_0 panels' 4-bit products at their own peak.
        const double byte_macs = nibble_peak > 0 ? int8_macs - nibble_macs : int8_macs;
        double int8_seconds = byte_macs > 0 && int8_peak > 0 ? 2.0 * byte_macs / (int8_peak * 1e9) : 0;
        if (nibble_peak > 0) int8_seconds += 2.0 * nibble_macs / (nibble_peak * 1e9);
        const double pp_bound = 1.0 / (int8_seconds + 2.0 * float_macs / (fma_peak * 1e9));
        char peak[300];
        if (int8_macs == 0) {
            std::snprintf(peak, sizeof peak, "of the FMA peak %.1f GFLOP/s", fma_peak);
        } else if (nibble_peak > 0 && nibble_macs == int8_macs && float_macs == 0) {
            std::snprintf(peak, sizeof peak, "of the int8 peak for 4-bit codes %.1f GOP/s", nibble_peak);
        } else if (nibble_peak > 0 && float_macs == 0) {
            std::snprintf(peak, sizeof peak,
                          "of the bound %.1f tokens/s (%.0f%% of the multiply-adds on 4-bit codes at their int8 peak "
                          "%.1f GOP/s, the rest at the int8 dot-product peak %.1f GOP/s)",
                          pp_bound, 100.0 * nibble_macs / macs, nibble_peak, int8_peak);
        } else if (nibble_peak > 0) {
            std::snprintf(peak, sizeof peak,
                          "of the bound %.1f tokens/s (%.0f%% of the multiply-adds on 4-bit codes at their int8 peak "
                          "%.1f GOP/s, %.0f%% at the int8 dot-product peak %.1f GOP/s, the rest at the FMA peak %.1f "
                          "GFLOP/s)",
                          pp_bound, 100.0 * nibble_macs / macs, nibble_peak, 100.0 * byte_macs / macs, int8_peak,
                          fma_peak);
        } else if (float_macs == 0) {
            std::snprintf(peak, sizeof peak, "of the int8 dot-product peak %.1f GOP/s", int8_peak);
        } else {
            std::snprintf(peak, sizeof peak,
                          "of the bound %.1f tokens/s (%.0f%% of the multiply-adds at the int8 dot-product peak "
                          "%.1f GOP/s, the rest at the FMA peak %.1f GFLOP/s)",
                          pp_bound, 100.0 * int8_macs / macs, int8_peak, fma_peak);
        }
        std::printf("pp%-6d %12.1f %8.1f GOP/s    %5.1f%% %s (%s, %d threads)\n", in.n_prompt, pp_tps, gops,
                    100.0 * pp_tps / pp_bound, peak, std::string(cpu::name(cpu::active_level())).c_str(),
                    cpu->n_threads());
        if (in.decode_after_prompt) {
            std::printf("(tg decodes after the prompt, at context %d..%d; the bound counts weights, not KV reads)\n",
                        in.n_prompt, in.n_prompt + in.n_gen - 1);
        }
        std::printf(
            "tg%-6d %12.1f %8.1f GB/s     %5.1f%% of the bandwidth bound %.1f tokens/s "
            "(%.1f MB of weights per step, %.1f GB/s read bandwidth)\n",
            in.n_gen, tg_tps, tg_tps / in.n_seqs * bytes_per_token / 1e9, 100.0 * tg_tps / tg_bound, tg_bound,
            bytes_per_token / 1e6, bandwidth);
        // The bound is the best of short bursts; beside it, what a plain read of the same bytes got at the same
        // moments (on a quiet machine the two agree; on a shared one the bursts can run far ahead).
        if (!stream_share.empty()) {
            std::printf(
                "%-8s %12s %8s          %5.1f%% of a plain read of the step's bytes between the steps (median of %zu "
                "reps; the read %.1f GB/s at best)\n",
                "", "", "", 100.0 * median(stream_share), stream_share.size(), best(stream_gbs));
        }
        std::printf("limits: read bandwidth %.1f GB/s, FMA peak %.1f GFLOP/s, int8 dot-product peak %.1f GOP/s (%s)",
                    bandwidth, fma_peak, int8_peak,
                    cpu::active_level() == cpu::dispatch_level::avx512 ? "AVX-512 VNNI vpdpbusd"
                    : cpu::active_level() == cpu::dispatch_level::avx2 ? "AVX2 vpmaddubsw + vpmaddwd"
                                                                       : "scalar: none");
        if (nibble_peak > 0) {
            std::printf(
                ", for Q4_0 panels' 4-bit codes %.1f GOP/s%s", nibble_peak,
                cpu::active_level() == cpu::dispatch_level::avx2 ? " (8 vpmaddubsw summed in int16, 1 vpmaddwd)" : "");
        }
        std::printf("\n");
    } else if (const auto* gpu = dynamic_cast<const cuda_runner*>(&runner)) {
        // The weights a decode step reads (the embedding table too, of which a step reads only its tokens' rows; a MoE
        // layer's routed experts only) and the rate it reads them at, beside the device's copy bandwidth measured
        // now (256 MiB copied 20 times on the compute lane).
        const double bytes = static_cast<double>(gpu->decode_weight_bytes());
        const double on_device = static_cast<double>(gpu->weight_bytes());
        const double read_gbs = tg_tps / in.n_seqs * bytes / 1e9;
        std::printf(
            "pp%-6d %12.1f\ntg%-6d %12.1f %8.1f GB/s     (%.1f MB of weights read per token, embedding included",
            in.n_prompt, pp_tps, in.n_gen, tg_tps, read_gbs, bytes / 1e6);
        if (bytes != on_device) std::printf(": the routed experts only, of %.1f MB", on_device / 1e6);
        std::printf("; on %s)\n", gpu->device().name.c_str());
        auto copy = gpu->measure_copy_gb_per_s(uint64_t{256} << 20, 20);
        if (copy.ok() && copy.value() > 0.0) {
            std::printf(
                "%-8s %12s %8s          %5.1f%% of the device's copy bandwidth %.0f GB/s (read + write, measured "
                "in this run)\n",
                "", "", "", 100.0 * read_gbs / copy.value(), copy.value());
        } else {
            std::printf("limits: the device's copy bandwidth was not measured: %s\n",
                        copy.ok() ? "no time elapsed" : copy.message().c_str());
        }
    } else {
        std::printf("pp%-6d %12.1f\ntg%-6d %12.1f\n", in.n_prompt, pp_tps, in.n_gen, tg_tps);
    }
    if (!deep_share.empty()) {
        std::printf(
            "depth: decode at context %d..%d runs at %.1f%% of decode at context %d..%d (median of %zu reps, steps "
            "alternated; best %.1f against %.1f tokens/s)\n",
            in.n_prompt, in.n_prompt + in.n_gen - 1, 100.0 * median(deep_share), in.compare_depth,
            in.compare_depth + in.n_gen - 1, deep_share.size(), deep_best, shallow_best);
    }
    if (in.n_seqs > 1) std::printf("(%d sequences per step; tokens/s count all of them)\n", in.n_seqs);
    return exit_ok;
}

}  // namespace

const command_spec& bench_spec() {
    static const command_spec spec = [] {
        command_spec s{
            .name = "bench",
            .summary = "measure prompt processing and generation throughput",
            .usage =
                "troupe bench --model M.gguf [--n-prompt N] [--n-gen N] [--n-seqs N] [--reps N] "
                "[--decode-after-prompt [--compare-depth N]]\n"
                "       troupe bench --model M.gguf --spec NAME [--set plugins.spec.params.K=V] [--prompt TEXT | "
                "--prompts FILE] [--n-prompts N] [--n-gen N] [--temperature T] [--reps N]",
        };
        s.flags.push_back({"--n-prompt", "", "N", "prompt tokens per sequence (default 512)"});
        s.flags.push_back({"--n-gen", "", "N", "generated tokens per sequence (default 128)"});
        s.flags.push_back({"--n-seqs", "", "N", "sequences decoded together (default 1)"});
        s.flags.push_back({"--reps", "", "N", "repetitions, the best is reported (default 3)"});
        s.flags.push_back({"--decode-after-prompt", "", "",
                           "decode after the prompt (context n-prompt on), not from position 0 (llama-bench's depth)"});
        s.flags.push_back({"--compare-depth", "", "N",
                           "with --decode-after-prompt: also decode at context N, alternating steps with the deep "
                           "decode, and print the deep decode's speed as a share of it"});
        s.flags.push_back({"--spec", "", "NAME",
                           "speculative decoding with this spec plugin (plugins.spec.name): "
                           "batch 1 with and without it"});
        s.flags.push_back({"--prompt", "", "TEXT", "with --spec: a prompt (repeat for more)", true});
        s.flags.push_back(
            {"--prompts", "", "FILE", "with --spec: prompts, one per line (default ../shared/text/prompts.txt)"});
        s.flags.push_back({"--n-prompts", "", "N", "with --spec: the first N prompts (default 8)"});
        s.flags.push_back({"--temperature", "", "T",
                           "with --spec: sampling temperature (default 0: greedy, checked "
                           "identical)"});
        s.flags.push_back({"--print-config", "", "", "print the effective config as YAML and exit"});
        for (auto& f : engine_flags()) s.flags.push_back(f);
        s.details =
            "No model at hand? 'troupe synth --shape 1B --vocab V.gguf --type q8_0 -o 1B.gguf' writes one.\n"
            "'troupe bench serve --help': load a running server (config/experiments/).";
        return s;
    }();
    return spec;
}

int bench_command(const cli_args& args) {
    auto in = prepare_bench(args);
    if (!in) {
        std::fprintf(stderr, "troupe bench: %s\n", in.message().c_str());
        return exit_usage;
    }
    if (args.has("--print-config")) {
        std::fputs(to_yaml(in->config).c_str(), stdout);
        return exit_ok;
    }
    if (in->config.plugins.spec.name != "none") return bench::run_spec_bench(in->config, in->spec);
    return measure(*in);
}

}  // namespace troupe::cli
