// troupe perplexity --model M.gguf --file T.txt [--ctx N]: the perplexity of a model on a text, estimated as
// llama.cpp's llama-perplexity does (core/eval/perplexity.h), so the figures compare with its figures.
//
// The model loads through the same path as `troupe run` and `troupe bench` (load_model: weight format, quant
// plugin, attention plugin, kv.dtype, device), so whatever the config selects is what is measured. Each window
// runs as one sequence from position 0 over the same KV blocks (a window overwrites the previous one's rows
// before it reads them), in steps of at most scheduler.max_batched_tokens tokens, with logits only for the
// scored half. Progress per window goes to stderr; the estimate goes to stdout:
//   PPL = 10.9012 +/- 0.12345
//   scored 9472 tokens in 74 windows of 256 (...)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/eval/perplexity.h"
#include "core/loader/model_loader.h"

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/config/engine_config.h"

namespace troupe::cli {
namespace {

constexpr int32_t default_ctx = 512;  // llama-perplexity's default context

struct perplexity_inputs {
    engine_config config;
    std::string file;
    std::optional<long long> n_ctx;  // --ctx; unset: default_ctx, or the model's context if smaller
};

result<perplexity_inputs> prepare_perplexity(const cli_args& args) {
    std::vector<std::string> problems;
    perplexity_inputs in;
    auto config = resolve_cli_config(args);
    if (!config) problems.push_back(config.message());
    if (!args.has("--file")) problems.push_back("--file is required (the text to score)");
    in.file = args.value_or("--file", "");
    if (auto v = args.value("--ctx")) {
        auto n = parse_int_flag("--ctx", *v);
        if (!n)
            problems.push_back(n.message());
        else
            in.n_ctx = *n;  // its range is checked against the model's context in measure()
    }
    if (!problems.empty()) return make_error(join_problems(problems));
    in.config = std::move(*config);
    auto model = resolve_model_path(in.config);
    if (!model) return model.err();
    in.config.model = *model;
    return in;
}

// The whole file, less one trailing newline (as llama.cpp reads --file).
result<std::string> read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return make_error(path + ": cannot open the text file");
    std::stringstream s;
    s << f.rdbuf();
    std::string text = s.str();
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
}

int fail(const std::string& message) {
    std::fprintf(stderr, "troupe perplexity: %s\n", message.c_str());
    return exit_failure;
}

int measure(const perplexity_inputs& in) {
    using clock = std::chrono::steady_clock;
    set_log_level(in.config.log_level);
    // The window is checked before the model loads where it can be (a window too small to score anything).
    if (in.n_ctx && *in.n_ctx < eval::min_window) {
        return fail("--ctx " + std::to_string(*in.n_ctx) + ": must be at least " + std::to_string(eval::min_window) +
                    " (the second half of each window, less its last token, is scored)");
    }
    auto text = read_text(in.file);
    if (!text) return fail(text.message());
    auto model = load_model(in.config);
    if (!model) return fail(model.message());
    model_runner& runner = *model->runner;
    const tokenizer& tok = *model->tok;

    if (in.n_ctx && *in.n_ctx > runner.n_ctx()) {
        return fail("--ctx " + std::to_string(*in.n_ctx) + " exceeds the model's context of " +
                    std::to_string(runner.n_ctx()) + " (" + in.config.model + "): use --ctx " +
                    std::to_string(runner.n_ctx()) + " or less");
    }
    const int32_t n_ctx = in.n_ctx ? static_cast<int32_t>(*in.n_ctx) : std::min(default_ctx, runner.n_ctx());
    // As llama.cpp: BOS first where the vocabulary adds one, special-token text matched as plain text.
    const std::vector<int32_t> tokens = tok.encode(*text, /*add_bos=*/true, /*parse_special=*/false);
    auto plan = eval::plan_windows(static_cast<int64_t>(tokens.size()), n_ctx);
    if (!plan) return fail(in.file + ": " + plan.message());
    const int32_t bos = tok.vocab().add_bos ? tok.bos_id() : -1;

    const kv_geometry kv = runner.kv();
    const int32_t n_blocks = (n_ctx + kv.block_size - 1) / kv.block_size;
    if (n_blocks > kv.n_blocks) {
        return fail("a window of " + std::to_string(n_ctx) + " tokens needs " + std::to_string(n_blocks) +
                    " KV blocks, the pool has " + std::to_string(kv.n_blocks) + " (raise kv.memory or lower --ctx)");
    }
    std::vector<int32_t> block_table(n_blocks);
    for (int32_t b = 0; b < n_blocks; ++b) block_table[b] = b;
    const std::vector<eval::window_chunk> chunks =
        eval::window_chunks(*plan, std::max(1, in.config.scheduler.max_batched_tokens));

    std::fprintf(stderr, "troupe perplexity: %s\n", runner.description().c_str());
    std::fprintf(stderr, "troupe perplexity: %zu tokens, %d windows of %d, scoring positions %d..%d of each\n",
                 tokens.size(), plan->n_windows, n_ctx, plan->first + 1, n_ctx - 1);
    eval::nll_accumulator acc;
    forward_output out;
    const auto t0 = clock::now();
    for (int32_t w = 0; w < plan->n_windows; ++w) {
        const std::vector<int32_t> window = eval::window_tokens(tokens, *plan, w, bos);
        for (const eval::window_chunk& c : chunks) {
            forward_batch batch;
            batch.seqs.push_back(sequence_step{w,
                                               std::vector<int32_t>(window.begin() + c.begin, window.begin() + c.end),
                                               c.begin, block_table, c.with_logits});
            if (status st = runner.forward(batch, out); !st) {
                return fail("window " + std::to_string(w + 1) + ", positions [" + std::to_string(c.begin) + ", " +
                            std::to_string(c.end) + "): " + st.message());
            }
            if (!c.with_logits) continue;
            // Row i holds the logits at position c.begin + i, which predict the token after it.
            for (int32_t pos = c.begin; pos < c.end && pos + 1 < n_ctx; ++pos) {
                acc.add(eval::token_nll(out.row(0, pos - c.begin), window[pos + 1]));
            }
        }
        runner.forget(w);
        std::fprintf(stderr, "troupe perplexity: window %d/%d: PPL so far %.4f (%lld tokens scored)\n", w + 1,
                     plan->n_windows, acc.ppl(), static_cast<long long>(acc.count()));
    }
    const double seconds = std::chrono::duration<double>(clock::now() - t0).count();

    std::printf("PPL = %.4f +/- %.5f\n", acc.ppl(), acc.ppl_error());
    std::printf("scored %lld tokens in %d windows of %d (the text is %zu tokens; mean NLL %.5f)\n",
                static_cast<long long>(acc.count()), plan->n_windows, n_ctx, tokens.size(), acc.mean_nll());
    std::fprintf(stderr, "troupe perplexity: %.2f s, %.0f tokens/s evaluated\n", seconds,
                 static_cast<double>(plan->n_windows) * n_ctx / seconds);
    return exit_ok;
}

}  // namespace

const command_spec& perplexity_spec() {
    static const command_spec spec = [] {
        command_spec s{
            .name = "perplexity",
            .summary = "perplexity of the model on a text file (llama-perplexity's estimate)",
            .usage = "troupe perplexity --model M.gguf --file T.txt [--ctx N] [--config C.yaml] [--set KEY=VALUE]",
        };
        s.flags.push_back({"--file", "-f", "FILE", "the text to score (UTF-8)"});
        s.flags.push_back({"--ctx", "", "N", "tokens per window (default 512, or the model's context if smaller)"});
        for (auto& f : engine_flags()) s.flags.push_back(f);
        s.details =
            "The text is cut into non-overlapping windows of N tokens, each run from position 0 with BOS first; "
            "the second half of each window is scored. Prints PPL = <value> +/- <error> (the error from the "
            "standard error of the mean negative log-likelihood). The weights, plugins and kv.dtype are those "
            "the config selects, e.g. --set kv.dtype=f16.";
        return s;
    }();
    return spec;
}

int perplexity_command(const cli_args& args) {
    auto in = prepare_perplexity(args);
    if (!in) {
        std::fprintf(stderr, "troupe perplexity: %s\n", in.message().c_str());
        return exit_usage;
    }
    return measure(*in);
}

}  // namespace troupe::cli
