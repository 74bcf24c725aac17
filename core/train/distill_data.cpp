#include "core/train/distill_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>

#include "core/log/log.h"
#include "core/model/cpu_llama.h"
#include "core/model/tap_sink.h"

namespace troupe::train {
namespace {

// Copies the last layer's LAYER_OUT rows and the logits rows of each step into their samples, by (sequence id,
// position).
class recording_sink final : public tap_sink {
public:
    recording_sink(int32_t last_layer, int32_t dim, int32_t n_vocab)
        : last_layer_(last_layer), dim_(dim), n_vocab_(n_vocab) {}
    uint64_t wanted() const override { return tap_bit(tap_point::layer_out) | tap_bit(tap_point::logits); }
    status observe(const tap_data& d) override {
        const bool hidden = d.tap == tap_point::layer_out;
        if (hidden && d.layer != last_layer_) return {};
        const int64_t width = hidden ? dim_ : n_vocab_;
        if (d.width != width) {
            return make_error("distill: tap " + std::string(tap_name(d.tap)) + " has rows of " +
                              std::to_string(d.width) + ", expected " + std::to_string(width));
        }
        for (int64_t r = 0; r < d.n_rows; ++r) {
            auto it = samples.find(d.seq_ids[r]);
            if (it == samples.end()) continue;
            std::vector<float>& dst = hidden ? it->second->hidden : it->second->logits;
            const size_t at = static_cast<size_t>(d.positions[r]) * width;
            if (at + width > dst.size()) return make_error("distill: a tap row lies past the sample's end");
            std::copy(d.data + r * width, d.data + (r + 1) * width, dst.begin() + at);
        }
        return {};
    }
    std::map<int64_t, distill_sample*> samples;  // the sequences of the running group

private:
    int32_t last_layer_, dim_, n_vocab_;
};

// A step with logits for every token (the sink wants every row's distribution).
sequence_step step_of(int64_t seq_id, std::vector<int32_t> tokens, int32_t pos0, const std::vector<int32_t>& table) {
    sequence_step s;
    s.seq_id = seq_id;
    s.tokens = std::move(tokens);
    s.pos0 = pos0;
    s.block_table = table;
    s.all_logits = true;
    return s;
}

int32_t sample_token(const float* logits, int32_t n_vocab, float temperature, std::mt19937_64& rng) {
    if (temperature <= 0) return static_cast<int32_t>(std::max_element(logits, logits + n_vocab) - logits);
    const float mx = *std::max_element(logits, logits + n_vocab);
    std::vector<double> w(n_vocab);
    for (int32_t i = 0; i < n_vocab; ++i) w[i] = std::exp((logits[i] - mx) / temperature);
    std::discrete_distribution<int32_t> pick(w.begin(), w.end());
    return pick(rng);
}

}  // namespace

int64_t distill_dataset::n_train_positions() const {
    int64_t n = 0;
    for (const distill_sample& s : train) n += s.size();
    return n;
}

engine_config target_config(const std::string& path, int32_t threads, int32_t parallel) {
    engine_config config;
    config.model = path;
    config.threads = threads;
    config.device = device_kind::cpu;
    config.plugins.attention = plugin_config("gqa");
    config.plugins.quant = plugin_config("none");
    config.plugins.more_quant.clear();
    config.scheduler.max_running_seqs = parallel;
    return config;
}

result<openings> read_openings(const tokenizer& tok, const data_params& p) {
    std::ifstream f(p.text_path);
    if (!f) return make_error(p.text_path + ": cannot open the text file (--data)");
    openings out;
    std::string line;
    int32_t index = 0;
    while (std::getline(f, line)) {
        if (line.find_first_not_of(" \t\r") == std::string::npos || line == "<|endofstory|>") continue;
        const std::vector<int32_t> t = tok.encode(line, /*add_bos=*/true, /*parse_special=*/false);
        auto& dst = index % 10 == 9 ? out.held_out : out.train;
        index += 1;
        const int32_t n = static_cast<int32_t>(t.size());
        for (int32_t o = std::min(p.open_tokens, n); o <= n; o += p.open_stride) {
            dst.emplace_back(t.begin(), t.begin() + o);
            if (o == n) break;
        }
    }
    if (out.train.empty()) return make_error(p.text_path + ": no text lines to take openings from (--data)");
    if (p.max_openings > 0) {
        const size_t held = std::max<size_t>(1, p.max_openings / 10);
        if (out.train.size() > static_cast<size_t>(p.max_openings)) out.train.resize(p.max_openings);
        if (out.held_out.size() > held) out.held_out.resize(held);
    }
    return out;
}

namespace {

// Openings of one line are prefixes of each other. In a group, the longest opening of each run of such prefixes
// (its root) is prefilled whole in the first step; every shorter one starts a step later from the start of the KV
// block that holds its last token, reading the root's blocks below it (written in the first step and never again:
// the root's own writes come after its opening's last token), and takes the root's hidden and logits rows for the
// positions it skips. With openings every 16 tokens this skips most of the prefill (the grown 1B's data phase
// 960.5 s -> 456.8 s). The rows a shorter opening takes were computed in the root's longer prefill, so they can differ
// from its own prefill's in the last float bits.
status generate(loaded_model& target, recording_sink& sink, const std::vector<std::vector<int32_t>>& opens,
                const data_params& p, uint64_t seed_salt, std::vector<distill_sample>& out, int64_t& next_seq_id,
                const std::function<void(size_t)>& group_done) {
    model_runner& runner = *target.runner;
    const int32_t n_vocab = runner.n_vocab(), dim = target.cpu->hparams().dim;
    const int32_t eos = target.tok->eos_id();
    const kv_geometry kv = runner.kv();
    const int32_t bs = kv.block_size;
    int32_t longest = 0;
    for (const auto& o : opens) longest = std::max<int32_t>(longest, static_cast<int32_t>(o.size()));
    const int32_t max_len = std::min(longest + p.gen_tokens, runner.n_ctx());
    const int32_t per_seq = (max_len + bs - 1) / bs;
    const int32_t group = std::max(1, std::min(p.parallel, kv.n_blocks / per_seq));
    if (per_seq > kv.n_blocks) {
        return make_error("distill: a sequence of " + std::to_string(max_len) + " tokens needs " +
                          std::to_string(per_seq) + " KV blocks, the pool has " + std::to_string(kv.n_blocks));
    }
    out.resize(opens.size());
    forward_output fo;
    for (size_t g0 = 0; g0 < opens.size(); g0 += group) {
        const size_t g1 = std::min(opens.size(), g0 + group);
        struct running {
            size_t index;
            int64_t seq_id;
            std::vector<int32_t> table;
            std::mt19937_64 rng;
            size_t root;        // the opening whose prefill this one reads (itself when it prefills whole)
            int32_t start = 0;  // its first position run through the target
        };
        std::vector<running> waiting, live;
        sink.samples.clear();
        for (size_t i = g0; i < g1; ++i) {
            distill_sample& s = out[i];
            s.tokens =
                std::vector<int32_t>(opens[i].begin(), opens[i].begin() + std::min<size_t>(opens[i].size(), max_len));
            s.n_prompt = s.size();
            s.hidden.assign(static_cast<size_t>(max_len) * dim, 0.0f);
            s.logits.assign(static_cast<size_t>(max_len) * n_vocab, 0.0f);
            running r{i, next_seq_id++, {}, std::mt19937_64(p.seed * 1000003 + seed_salt + i), i};
            const int32_t slot = static_cast<int32_t>(i - g0);
            for (int32_t b = 0; b < per_seq; ++b) r.table.push_back(slot * per_seq + b);
            sink.samples[r.seq_id] = &s;
            waiting.push_back(std::move(r));
        }
        // Roots: from the last opening of the group back, a run of openings each a prefix of the next shares the
        // run's last one.
        for (size_t k = waiting.size() - 1; k-- > 0;) {
            const std::vector<int32_t>& a = out[waiting[k].index].tokens;
            const std::vector<int32_t>& b = out[waiting[k + 1].index].tokens;
            if (p.share_prefixes && a.size() < b.size() && std::equal(a.begin(), a.end(), b.begin()))
                waiting[k].root = waiting[k + 1].root;
        }
        for (running& r : waiting) {  // a shorter opening's table: its root's blocks below its start
            if (r.root == r.index) continue;
            r.start = (out[r.index].size() - 1) / bs * bs;  // the block of its last token on: at least one token runs
            const std::vector<int32_t>& root_table = waiting[r.root - g0].table;
            std::copy_n(root_table.begin(), r.start / bs, r.table.begin());
        }
        forward_batch batch;
        std::vector<running> later;
        for (running& r : waiting) {
            if (r.root == r.index) batch.seqs.push_back(step_of(r.seq_id, out[r.index].tokens, 0, r.table));
            (r.root == r.index ? live : later).push_back(std::move(r));
        }
        bool first_step = true;
        while (!batch.seqs.empty()) {
            if (status st = runner.forward(batch, fo); !st)
                return make_error("distill: the target failed: " + st.message());
            forward_batch next;
            std::vector<running> still;
            for (size_t k = 0; k < live.size(); ++k) {
                distill_sample& s = out[live[k].index];
                const std::span<const float> row = fo.row(k, fo.n_rows[k] - 1);
                const int32_t t = sample_token(row.data(), n_vocab, p.temperature, live[k].rng);
                if (t == eos || s.size() >= max_len || s.size() - s.n_prompt >= p.gen_tokens) {
                    runner.forget(live[k].seq_id);
                    continue;
                }
                s.tokens.push_back(t);
                next.seqs.push_back(step_of(live[k].seq_id, {t}, s.size() - 1, live[k].table));
                still.push_back(std::move(live[k]));
            }
            if (first_step) {  // the roots' rows are recorded: the shorter openings join from their start
                for (running& r : later) {
                    distill_sample& s = out[r.index];
                    const distill_sample& root = out[r.root];
                    std::copy_n(root.hidden.begin(), static_cast<size_t>(r.start) * dim, s.hidden.begin());
                    std::copy_n(root.logits.begin(), static_cast<size_t>(r.start) * n_vocab, s.logits.begin());
                    next.seqs.push_back(step_of(
                        r.seq_id, std::vector<int32_t>(s.tokens.begin() + r.start, s.tokens.end()), r.start, r.table));
                    still.push_back(std::move(r));
                }
                later.clear();
                first_step = false;
            }
            batch = std::move(next);
            live = std::move(still);
        }
        for (size_t i = g0; i < g1; ++i) {
            out[i].hidden.resize(static_cast<size_t>(out[i].size()) * dim);
            out[i].logits.resize(static_cast<size_t>(out[i].size()) * n_vocab);
            out[i].hidden.shrink_to_fit();  // allocated for max_len rows while it generated
            out[i].logits.shrink_to_fit();
        }
        group_done(g1 - g0);
    }
    return {};
}

// MemAvailable of /proc/meminfo in bytes, 0 where it cannot be read.
uint64_t available_memory() {
    std::ifstream f("/proc/meminfo");
    std::string key;
    uint64_t kib = 0;
    std::string unit;
    while (f >> key >> kib >> unit) {
        if (key == "MemAvailable:") return kib * 1024;
    }
    return 0;
}

// The data set's rows at most: every opening continued by gen_tokens (an EOS may end it sooner), plus the running
// group's samples at their full length while they generate.
uint64_t dataset_bytes(const openings& opens, const data_params& p, int32_t max_len, int64_t row_floats) {
    uint64_t positions = 0;
    for (const auto* set : {&opens.train, &opens.held_out}) {
        for (const auto& o : *set)
            positions +=
                static_cast<uint64_t>(std::min<int64_t>(static_cast<int64_t>(o.size()) + p.gen_tokens, max_len));
    }
    positions += static_cast<uint64_t>(std::max(1, p.parallel)) * static_cast<uint64_t>(max_len);
    return positions * static_cast<uint64_t>(row_floats) * sizeof(float);
}

}  // namespace

result<distill_dataset> make_dataset(loaded_model& target, const data_params& p, const data_progress& progress) {
    if (target.cpu == nullptr) return make_error("distill: the target must run on the CPU (device: cpu)");
    auto opens = read_openings(*target.tok, p);
    if (!opens) return opens.err();
    const llama_hparams& hp = target.cpu->hparams();
    {
        int32_t longest = 0;
        for (const auto* set : {&opens->train, &opens->held_out}) {
            for (const auto& o : *set) longest = std::max<int32_t>(longest, static_cast<int32_t>(o.size()));
        }
        const int32_t max_len = std::min(longest + p.gen_tokens, target.runner->n_ctx());
        const uint64_t need = dataset_bytes(*opens, p, max_len, static_cast<int64_t>(hp.dim) + hp.n_vocab);
        const uint64_t budget = p.memory_budget != 0 ? p.memory_budget : available_memory() / 10 * 8;
        TROUPE_LOG_INFO("distill",
                        "data set: %zu openings, up to %.2f GiB of hidden and logits rows (may use %.2f GiB)",
                        opens->train.size() + opens->held_out.size(), static_cast<double>(need) / (1 << 30),
                        static_cast<double>(budget) / (1 << 30));
        if (budget != 0 && need > budget) {
            char msg[512];
            std::snprintf(msg, sizeof msg,
                          "distill: the data set would take up to %.2f GiB (%zu openings continued by %d tokens, each "
                          "position's hidden state and logits: %d + %d floats), more than the %.2f GiB it may use: "
                          "give fewer openings (--max-openings), shorter continuations (--gen) or openings further "
                          "apart (--open-stride)",
                          static_cast<double>(need) / (1 << 30), opens->train.size() + opens->held_out.size(),
                          p.gen_tokens, hp.dim, hp.n_vocab, static_cast<double>(budget) / (1 << 30));
            return make_error(msg);
        }
    }
    auto sink = std::make_shared<recording_sink>(hp.n_layers - 1, hp.dim, hp.n_vocab);
    target.cpu->attach_taps(sink);
    distill_dataset d;
    d.dim = hp.dim;
    d.n_vocab = hp.n_vocab;
    int64_t next_seq_id = 0;
    const size_t total = opens->train.size() + opens->held_out.size();
    size_t done = 0;
    auto group_done = [&](size_t n) {
        done += n;
        if (progress) progress(done, total);
    };
    status st = generate(target, *sink, opens->train, p, 0, d.train, next_seq_id, group_done);
    if (st) st = generate(target, *sink, opens->held_out, p, 500000, d.held_out, next_seq_id, group_done);
    target.cpu->attach_taps(nullptr);
    if (!st) return make_error(st.message());
    return d;
}

}  // namespace troupe::train
