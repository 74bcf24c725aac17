// Building a load experiment's requests: arrivals, lengths, prompts (see workload.h).
#include "cli/bench_serve/workload.h"

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>

#include "core/gguf/gguf_file.h"
#include "core/tokenizer/tokenizer.h"

namespace troupe::bench {

std::vector<double> arrival_times(const arrival_config& arrivals, int32_t n, uint64_t seed) {
    std::vector<double> t(static_cast<size_t>(std::max(n, 0)), 0.0);
    switch (arrivals.kind) {
        case arrival_kind::burst:
            break;
        case arrival_kind::fixed:
            TROUPE_ASSERT(arrivals.rate_per_s > 0);
            for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<double>(i) / arrivals.rate_per_s;
            break;
        case arrival_kind::poisson: {
            TROUPE_ASSERT(arrivals.rate_per_s > 0);
            std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
            std::exponential_distribution<double> gap(arrivals.rate_per_s);
            for (size_t i = 1; i < t.size(); ++i) t[i] = t[i - 1] + gap(rng);
            break;
        }
    }
    return t;
}

namespace {

// A prompt_config's or output_config's length keys and its kind (their enums have the same names).
template <class Config>
length_distribution lengths_of(const Config& c) {
    using kind = decltype(c.kind);
    length_distribution d{length_kind::fixed, c.tokens, c.min_tokens, c.max_tokens, c.median_tokens, c.sigma};
    switch (c.kind) {
        case kind::fixed:
        case kind::file:
            break;
        case kind::uniform:
            d.kind = length_kind::uniform;
            break;
        case kind::lognormal:
            d.kind = length_kind::lognormal;
            break;
    }
    return d;
}

}  // namespace

length_distribution prompt_lengths(const prompt_config& prompt) {
    return lengths_of(prompt);
}

length_distribution output_lengths(const output_config& output) {
    return lengths_of(output);
}

std::vector<int32_t> sample_lengths(const length_distribution& dist, int32_t n, std::mt19937_64& rng) {
    std::vector<int32_t> out(static_cast<size_t>(std::max(n, 0)), dist.tokens);
    switch (dist.kind) {
        case length_kind::fixed:
            break;
        case length_kind::uniform: {
            TROUPE_ASSERT(dist.min_tokens >= 1 && dist.min_tokens <= dist.max_tokens);
            std::uniform_int_distribution<int32_t> len(dist.min_tokens, dist.max_tokens);
            for (auto& v : out) v = len(rng);
            break;
        }
        case length_kind::lognormal: {
            TROUPE_ASSERT(dist.min_tokens >= 1 && dist.min_tokens <= dist.median_tokens &&
                          dist.median_tokens <= dist.max_tokens && dist.sigma > 0);
            // Clipping in the log domain first keeps exp() finite whatever the draw.
            const double lo = std::log(static_cast<double>(dist.min_tokens));
            const double hi = std::log(static_cast<double>(dist.max_tokens));
            std::normal_distribution<double> ln_len(std::log(static_cast<double>(dist.median_tokens)), dist.sigma);
            for (auto& v : out) {
                const double x = std::round(std::exp(std::clamp(ln_len(rng), lo, hi)));
                v = std::clamp(static_cast<int32_t>(x), dist.min_tokens, dist.max_tokens);
            }
            break;
        }
    }
    return out;
}

text_corpus text_corpus::from_words(std::string_view text) {
    text_corpus c;
    std::istringstream in{std::string(text)};
    std::string w;
    while (in >> w) {
        c.ids_.push_back(static_cast<int32_t>(c.words_.size()));
        c.words_.push_back(std::move(w));
    }
    return c;
}

text_corpus text_corpus::from_tokens(std::vector<int32_t> ids, decode_fn decode) {
    text_corpus c;
    c.ids_ = std::move(ids);
    c.decode_ = std::move(decode);
    return c;
}

std::string text_corpus::take(size_t offset, int32_t n) const {
    if (n <= 0 || ids_.empty()) return {};
    std::vector<int32_t> ids;
    ids.reserve(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) ids.push_back(ids_[(offset + static_cast<size_t>(i)) % ids_.size()]);
    if (decode_) return decode_(ids);
    std::string s;
    for (int32_t id : ids) {
        if (!s.empty()) s += ' ';
        s += words_[static_cast<size_t>(id)];
    }
    return s;
}

namespace {

constexpr std::string_view story_separator = "<|endofstory|>";

std::string trim(std::string_view s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos) return {};
    const auto e = s.find_last_not_of(" \t\r\n");
    return std::string(s.substr(b, e - b + 1));
}

bool is_user(std::string_view who) {
    return who == "human" || who == "user";
}
bool is_assistant(std::string_view who) {
    return who == "gpt" || who == "assistant" || who == "chatgpt";
}

// The string at obj[key], or "".
std::string string_at(const boost::json::object& obj, std::string_view key) {
    auto it = obj.find(key);
    if (it == obj.end() || !it->value().is_string()) return {};
    return std::string(it->value().as_string());
}

std::string read_file(const std::string& path, bool& ok) {
    std::ifstream in(path, std::ios::binary);
    ok = static_cast<bool>(in);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// path as given when it exists (or is absolute), else under config_dir.
std::string resolve(const std::string& path, const std::string& config_dir) {
    if (path.empty() || path[0] == '/' || config_dir.empty()) return path;
    if (std::ifstream(path).good()) return path;
    std::string alt = config_dir + "/" + path;
    return std::ifstream(alt).good() ? alt : path;
}

int32_t count_words(std::string_view s) {
    int32_t n = 0;
    bool in_word = false;
    for (char c : s) {
        const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
        if (!space && !in_word) ++n;
        in_word = !space;
    }
    return n;
}

}  // namespace

std::vector<source_entry> split_text_entries(std::string_view text) {
    std::vector<source_entry> out;
    const bool stories = text.find(story_separator) != std::string_view::npos;
    size_t pos = 0;
    std::string current;
    while (pos <= text.size()) {
        size_t eol = text.find('\n', pos);
        if (eol == std::string_view::npos) eol = text.size();
        const std::string line = trim(text.substr(pos, eol - pos));
        pos = eol + 1;
        if (!stories) {
            if (!line.empty()) out.push_back({line, {}});
            continue;
        }
        if (line == story_separator) {
            if (!trim(current).empty()) out.push_back({trim(current), {}});
            current.clear();
        } else {
            current += line + "\n";
        }
    }
    if (stories && !trim(current).empty()) out.push_back({trim(current), {}});
    return out;
}

result<std::vector<source_entry>> parse_conversations(std::string_view json_text, std::string_view source) {
    boost::system::error_code ec;
    boost::json::value root = boost::json::parse(json_text, ec);
    if (ec) return make_error(std::string(source) + ": not valid JSON (" + ec.message() + ")");
    if (!root.is_array()) return make_error(std::string(source) + ": expected a JSON list of conversations");
    std::vector<source_entry> out;
    for (const auto& item : root.as_array()) {
        if (!item.is_object()) continue;
        const auto& obj = item.as_object();
        const boost::json::value* turns = obj.if_contains("conversations");
        const bool sharegpt = turns != nullptr;
        if (!turns) turns = obj.if_contains("messages");
        if (!turns || !turns->is_array()) continue;
        source_entry e;
        bool have_prompt = false;
        for (const auto& turn : turns->as_array()) {
            if (!turn.is_object()) continue;
            const auto& t = turn.as_object();
            const std::string who = string_at(t, sharegpt ? "from" : "role");
            const std::string text = string_at(t, sharegpt ? "value" : "content");
            if (!have_prompt && is_user(who) && !text.empty()) {
                e.prompt = text;
                have_prompt = true;
            } else if (have_prompt && is_assistant(who) && !text.empty()) {
                e.reply = text;
                break;
            }
        }
        if (have_prompt && !e.reply.empty()) out.push_back(std::move(e));
    }
    if (out.empty()) {
        return make_error(std::string(source) +
                          ": no conversation with a user turn followed by an assistant turn (expected "
                          "[{\"conversations\": [{\"from\": \"human\", \"value\": ...}, {\"from\": \"gpt\", ...}]}])");
    }
    return out;
}

workload_source words_source(std::string_view text, std::vector<source_entry> entries) {
    workload_source s;
    s.corpus = text_corpus::from_words(text);
    s.entries = std::move(entries);
    s.count_tokens = count_words;
    return s;
}

result<workload_source> load_workload_source(const prompt_config& prompt, const std::string& config_dir) {
    const std::string path = resolve(prompt.source, config_dir);
    bool ok = false;
    const std::string text = read_file(path, ok);
    if (!ok) {
        return make_error("prompt.source: cannot read '" + prompt.source + "' (tried it from the working directory" +
                          (config_dir.empty() ? "" : " and from " + config_dir) + ")");
    }
    std::vector<source_entry> entries;
    std::string corpus_text;
    if (path.ends_with(".json")) {
        auto conv = parse_conversations(text, path);
        if (!conv) return conv.err();
        entries = std::move(*conv);
        for (const auto& e : entries) corpus_text += e.prompt + "\n";
    } else {
        entries = split_text_entries(text);
        for (const auto& e : entries) corpus_text += e.prompt + "\n";
    }
    if (entries.empty()) return make_error("prompt.source: '" + path + "' holds no text");
    if (prompt.tokenizer.empty()) return words_source(corpus_text, std::move(entries));

    const std::string tok_path = resolve(prompt.tokenizer, config_dir);
    auto file = gguf::gguf_file::open(tok_path);
    if (!file) return make_error("prompt.tokenizer: " + file.message());
    auto tok = tokenizer::from_gguf(**file);
    if (!tok) return make_error("prompt.tokenizer: " + tok.message());
    std::shared_ptr<const tokenizer> t = *tok;
    workload_source s;
    s.entries = std::move(entries);
    s.corpus = text_corpus::from_tokens(t->encode(corpus_text, false),
                                        [t](std::span<const int32_t> ids) { return t->decode(ids); });
    s.count_tokens = [t](std::string_view text) { return static_cast<int32_t>(t->encode(text, false).size()); };
    s.exact_tokens = true;
    return s;
}

result<std::vector<request_spec>> build_requests(const load_config& config, const workload_source& source) {
    const int32_t n = config.n_requests + config.warmup_requests;
    std::mt19937_64 rng(config.seed);
    const auto& p = config.prompt;
    const auto& o = config.output;
    if (p.kind != prompt_kind::file && source.corpus.size() == 0) return make_error("prompt.source: no text to cut");
    if (p.kind == prompt_kind::file && source.entries.empty()) return make_error("prompt.source: no entries");

    std::vector<size_t> order(source.entries.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::shuffle(order.begin(), order.end(), rng);

    const std::vector<int32_t> prompt_lens = sample_lengths(prompt_lengths(p), n, rng);
    const std::vector<int32_t> output_lens = sample_lengths(output_lengths(o), n, rng);
    std::uniform_int_distribution<size_t> offset(0, source.corpus.size() == 0 ? 0 : source.corpus.size() - 1);
    const std::string prefix = source.corpus.take(0, p.shared_prefix_tokens);

    std::vector<double> arrivals = arrival_times(config.arrivals, config.n_requests, config.seed);
    std::vector<request_spec> out;
    out.reserve(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
        request_spec r;
        const source_entry* entry =
            order.empty() ? nullptr : &source.entries[order[static_cast<size_t>(i) % order.size()]];
        std::string own;
        if (p.kind == prompt_kind::file) {
            own = entry->prompt;
        } else {
            own = source.corpus.take(offset(rng), prompt_lens[static_cast<size_t>(i)]);
        }
        r.prompt = prefix.empty() ? own : prefix + " " + own;
        r.prompt_tokens = source.count_tokens(r.prompt);
        if (o.kind == output_kind::file) {
            r.max_tokens = std::max(1, source.count_tokens(entry->reply));
        } else {
            r.max_tokens = output_lens[static_cast<size_t>(i)];
        }
        r.arrival_s = i < config.warmup_requests ? 0.0 : arrivals[static_cast<size_t>(i - config.warmup_requests)];
        out.push_back(std::move(r));
    }
    return out;
}

}  // namespace troupe::bench
