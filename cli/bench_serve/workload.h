// workload: the requests of a load experiment, made before anything is sent (so a seed fixes them all).
//
// Arrivals (offsets in seconds from the run's start, non-decreasing):
//   poisson  t_0 = 0, t_i = t_{i-1} + Exp(rate)      (mean gap 1 / rate, coefficient of variation 1)
//   fixed    t_i = i / rate
//   burst    t_i = 0
// Lengths: fixed (every request the same), uniform (inclusive min..max), lognormal (ln(length) normal around
// ln(median) with standard deviation sigma, rounded and clipped to min..max: most short, a few very long, as
// chat traffic such as ShareGPT), file (the source's own entries).
// Prompts are cut from a text_corpus: a sequence of units (token ids when a tokenizer is given, else words)
// rendered back to text; a shared prefix is the corpus's first units, the same for every request.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/bench_serve/load_config.h"
#include "core/result.h"

namespace troupe::bench {

std::vector<double> arrival_times(const arrival_config& arrivals, int32_t n, uint64_t seed);

enum class length_kind { fixed, uniform, lognormal };

// A distribution of prompt (own part) or output lengths; file lengths come from the source instead.
struct length_distribution {
    length_kind kind = length_kind::fixed;
    int32_t tokens = 0;         // fixed
    int32_t min_tokens = 0;     // uniform, lognormal: inclusive, >= 1
    int32_t max_tokens = 0;     // uniform, lognormal: inclusive
    int32_t median_tokens = 0;  // lognormal: in min..max
    double sigma = 0.0;         // lognormal: standard deviation of ln(length), > 0
};

// The distributions a load config names (a file kind gives fixed `tokens`, unused).
length_distribution prompt_lengths(const prompt_config& prompt);
length_distribution output_lengths(const output_config& output);

// n lengths drawn from rng (only uniform and lognormal draw: a fixed distribution leaves rng as it was).
std::vector<int32_t> sample_lengths(const length_distribution& dist, int32_t n, std::mt19937_64& rng);

// Units of text that prompts are cut from; take() wraps around the end.
class text_corpus {
public:
    using decode_fn = std::function<std::string(std::span<const int32_t>)>;

    text_corpus() = default;
    // Whitespace-separated words; rendered joined by single spaces.
    static text_corpus from_words(std::string_view text);
    // Token ids and the tokenizer's decode.
    static text_corpus from_tokens(std::vector<int32_t> ids, decode_fn decode);

    size_t size() const { return ids_.size(); }
    // The text of n units starting at offset (mod size), wrapping; "" when n <= 0 or the corpus is empty.
    std::string take(size_t offset, int32_t n) const;

private:
    std::vector<int32_t> ids_;  // [n_units] token ids, or word indices into words_
    std::vector<std::string> words_;
    decode_fn decode_;  // empty: words
};

// One entry of a source file: a prompt and, for conversations, the reply that followed it.
struct source_entry {
    std::string prompt;
    std::string reply;
};

// Text: split on lines holding only <|endofstory|> when present, else one entry per non-empty line.
std::vector<source_entry> split_text_entries(std::string_view text);
// A JSON list of conversations: ShareGPT ({"conversations": [{"from": "human", "value": ...}, {"from": "gpt",
// ...}]}) or OpenAI ({"messages": [{"role": "user", "content": ...}, {"role": "assistant", ...}]}); the
// first user turn is the prompt, the next assistant turn the reply. Entries without both are skipped.
result<std::vector<source_entry>> parse_conversations(std::string_view json_text, std::string_view source);

// What prompts are made from: the corpus (fixed, uniform, lognormal), the entries (file kind), a token counter.
struct workload_source {
    text_corpus corpus;
    std::vector<source_entry> entries;
    std::function<int32_t(std::string_view)> count_tokens;  // exact with a tokenizer, else words
    bool exact_tokens = false;
};

// Reads prompt.source (and prompt.tokenizer, a GGUF, when set). Relative paths are tried against the
// working directory, then against `config_dir`.
result<workload_source> load_workload_source(const prompt_config& prompt, const std::string& config_dir);
// The same from text already in memory (tests): words count tokens.
workload_source words_source(std::string_view text, std::vector<source_entry> entries);

struct request_spec {
    std::string prompt;
    int32_t prompt_tokens = 0;  // counted by the source's counter (the server's usage replaces it)
    int32_t max_tokens = 0;     // requested output length
    double arrival_s = 0.0;     // offset from the run's start
};

// config.n_requests + config.warmup_requests requests, the warmup ones first (their arrival_s is 0).
result<std::vector<request_spec>> build_requests(const load_config& config, const workload_source& source);

}  // namespace troupe::bench
