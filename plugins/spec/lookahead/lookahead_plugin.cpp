// spec/lookahead: lookahead decoding (Fu et al. 2024, "Break the Sequential Dependency of LLM Inference Using
// Lookahead Decoding") within the spec SDK: no draft model, the target itself guesses ahead by Jacobi iteration.
//
// Each step's proposal for a sequence is one tree with two parts, hanging from the context's last token r:
//
//   nodes [0, V)        verification branch: up to G n-grams from the sequence's pool whose first token is r (their
//                       N-1 following tokens), most recently seen first, merged into a trie (draft_trie.h), so
//                       siblings are distinct. Deterministic drafts (no q rows): the core accepts the longest path the
//                       target agrees with (greedy) or runs exact speculative sampling over them.
//   nodes [V, V + L)    lookahead branch: the Jacobi window (jacobi_window.h), W columns of N-1 guesses in the
//                       paper's attention pattern, which trees express exactly (a chain for level 0, a chain per
//                       column hanging from it). These nodes are proposals too: the core verifies along any path, so
//                       a window the target agrees with is accepted like any draft, and an unhelpful one only costs
//                       its rows.
//
// The verification pass computes logits for every row of a draft step. The plugin observes the LOGITS tap (taps.h,
// version 2: `nodes` says which proposal node each row is) and keeps the argmax after each window column's last
// node; when the step's outcome arrives (accepted()), the window takes one Jacobi step and the n-grams it completed
// join the pool. The pool is also fed with every n-gram of the prompt (begin) and of the generated text (each
// proposal catches up with the request's tokens), as the paper's implementation does with its prompt option on.
//
// Node budget: the verification branch first (G * (N-1) nodes at most), then the window when it fits entirely in
// what the request leaves (max_nodes shrinks near max_tokens and the end of the context); a step without the window
// leaves it as it was. Where the host delivers no LOGITS rows for the window (a runner without taps, a host that
// verifies chains only and cut the tree), the window is turned off after a few steps with one log line, and the
// plugin keeps proposing pool n-grams (prompt and generated text) alone.
//
// Parameters:
//   window:  1..64 (default 2)    W, the window's columns (n-grams collected per step)
//   ngram:   3..16 (default 4)    N, tokens per n-gram (the window keeps N-1 levels)
//   guesses: 0..64 (default 1)    G, n-grams verified per step and kept per first token in the pool
//   lookahead: true/false (default false)  false: the verification branch only (a pool from the text)
//   pool_from_prompt: true/false (default true)  seed the pool with the prompt's n-grams
//   seed: 0..2^31-1 (default 0)    the window's initial guesses are drawn from the prompt with it and the sequence id
//
// The defaults are measured (troupe bench --spec lookahead, batch 1, greedy, Q8_0 targets of 110M and 1B on a
// 2-core CPU): each verified node costs ~0.1-0.2 of a target step there (1B; ~0.3 on 110M), the window adds little
// acceptance (tau 1.47 with W2 N3 G1 against 1.42-1.52 for the pool alone) for its 3-29 nodes, and larger G adds nodes
// but hardly any acceptance. The pool alone with N 4, G 1 (one 3-token chain at most) gave 1.3-1.5x where W3 N3 G2 gave
// 0.6-1.0x and the paper's W5 N4 G5 0.4-0.5x. lookahead: true turns the window on, for hosts where a step's extra
// rows cost less than here; with it, W2 N3 G1 was the best CPU tree measured (1.2x on 1B, 0.7x on 110M).
#include <troupe/plugin.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "plugins/common/plugin_support.h"
#include "plugins/common/spec_plugin_support.h"
#include "plugins/spec/lookahead/jacobi_window.h"
#include "plugins/spec/lookahead/ngram_pool.h"
#include "plugins/spec/ngram/draft_trie.h"

namespace {

using namespace troupe::plugin_support;
using troupe::spec_plugins::draft_trie;
using troupe::spec_plugins::jacobi_window;
using troupe::spec_plugins::ngram_pool;

constexpr const char* source = "spec/lookahead";
// Window steps without a single LOGITS row before the window is turned off.
constexpr int32_t max_unseen_windows = 4;

struct lookahead_params {
    int32_t window = 2;
    int32_t ngram = 4;
    int32_t guesses = 1;
    bool lookahead = false;
    bool pool_from_prompt = true;
    uint64_t seed = 0;
};

// One running sequence.
struct sequence {
    sequence(const lookahead_params& p, int64_t seq_id)
        : pool(p.ngram, std::max(1, p.guesses)),
          window(p.window, p.ngram),
          rng(0x9e3779b97f4a7c15ull ^ (p.seed * 0x100000001b3ull) ^
              static_cast<uint64_t>(seq_id) * 0xbf58476d1ce4e5b9ull) {
        if (rng == 0) rng = 1;
    }
    ngram_pool pool;
    jacobi_window window;
    uint64_t rng;
    int64_t n_text = 0;  // tokens of the sequence whose n-grams are in the pool
    // The window laid out in the last proposal (reset by accepted()):
    bool pending = false;
    int32_t key0 = 0;              // the root it hung from
    int32_t first_node = 0;        // its first node
    int32_t n_window_nodes = 0;    // its nodes
    std::vector<int32_t> slot_of;  // [n_window_nodes] output column of each window node, -1 for the others
    std::vector<int32_t> outputs;  // [n_columns] argmax after each column's last node, -1 until seen
    int32_t n_seen = 0;            // outputs seen
};

}  // namespace

struct troupe_plugin_instance {
    lookahead_params params;
    int32_t max_nodes = 0;
    bool window_off = false;       // no LOGITS rows came for max_unseen_windows windows in a row
    int32_t n_unseen_windows = 0;  // windows in a row without one LOGITS row
    std::unordered_map<int64_t, std::unique_ptr<sequence>> seqs;
    std::string error;

    int32_t verification_nodes() const { return params.guesses * (params.ngram - 1); }

    sequence& state(int64_t seq_id, std::span<const int32_t> prompt) {
        auto it = seqs.find(seq_id);
        if (it != seqs.end()) return *it->second;
        auto s = std::make_unique<sequence>(params, seq_id);
        if (params.pool_from_prompt) s->pool.add_text(prompt, 0);
        s->n_text = static_cast<int64_t>(prompt.size());
        if (params.lookahead) s->window.seed(prompt, s->rng);
        return *seqs.emplace(seq_id, std::move(s)).first->second;
    }
};

namespace {

int32_t lookahead_begin(troupe_plugin_instance* inst, int64_t seq_id, const int32_t* prompt, int64_t n) {
    return instance_op(inst, [&]() -> int32_t {
        if (n < 0 || (n > 0 && prompt == nullptr)) {
            inst->error = "begin: sequence " + std::to_string(seq_id) + " has " + std::to_string(n) +
                          " prompt tokens without a buffer";
            return TROUPE_ERR_INVALID_ARGUMENT;
        }
        inst->seqs.erase(seq_id);
        inst->state(seq_id, std::span<const int32_t>(prompt, static_cast<size_t>(n)));
        return TROUPE_OK;
    });
}

void lookahead_end(troupe_plugin_instance* inst, int64_t seq_id, int32_t /*reason*/) {
    inst->seqs.erase(seq_id);
}

// One request: the verification trie, then the window when it fits.
void propose_one(troupe_plugin_instance* inst, const troupe_spec_request& r, troupe_spec_proposal& p) {
    const std::span<const int32_t> tokens(r.tokens, static_cast<size_t>(r.n_tokens));
    sequence& s = inst->state(r.seq_id, tokens);
    s.pending = false;
    if (s.n_text < r.n_tokens) {
        s.pool.add_text(tokens, s.n_text);
        s.n_text = r.n_tokens;
    }
    const int32_t capacity = std::min(r.max_nodes, inst->max_nodes);
    if (capacity <= 0 || r.n_tokens == 0) return;
    const int32_t root = tokens.back();
    const int32_t cont = inst->params.ngram - 1;
    const int32_t depth = r.max_depth > 0 ? std::min(cont, r.max_depth) : cont;
    draft_trie trie(p.tokens, p.parents, std::min(capacity, inst->verification_nodes()));
    int32_t n_guesses = 0;
    s.pool.for_each_recent(root, [&](const int32_t* continuation) {
        trie.add(continuation, depth);
        return ++n_guesses < inst->params.guesses && !trie.full();
    });
    p.n_nodes = trie.size();

    if (inst->window_off || !s.window.seeded()) return;
    const int32_t n_window = s.window.n_nodes();
    if (n_window == 0 || p.n_nodes + n_window > capacity) return;
    s.window.lay_out(p.n_nodes, p.tokens, p.parents);
    s.pending = true;
    s.key0 = root;
    s.first_node = p.n_nodes;
    s.n_window_nodes = n_window;
    s.slot_of.assign(static_cast<size_t>(n_window), -1);
    const std::vector<int32_t>& outs = s.window.output_nodes();
    for (size_t c = 0; c < outs.size(); ++c)
        s.slot_of[static_cast<size_t>(outs[c] - s.first_node)] = static_cast<int32_t>(c);
    s.outputs.assign(outs.size(), -1);
    s.n_seen = 0;
    p.n_nodes += n_window;
}

int32_t lookahead_propose_batch(troupe_plugin_instance* inst, const troupe_spec_request* requests, int32_t n,
                                troupe_spec_proposal* out, const troupe_parallel* /*parallel*/) {
    return instance_op(inst, [&]() -> int32_t {
        if (!batch_args_valid(requests, n, out, inst->error)) return TROUPE_ERR_INVALID_ARGUMENT;
        for (int32_t i = 0; i < n; ++i) {
            if (!start_proposal(i, requests[i], out[i], inst->error)) return TROUPE_ERR_INVALID_ARGUMENT;
        }
        for (int32_t i = 0; i < n; ++i) propose_one(inst, requests[i], out[i]);
        return TROUPE_OK;
    });
}

int32_t lookahead_accepted(troupe_plugin_instance* inst, int64_t seq_id, const int32_t* /*tokens*/, int32_t /*n*/,
                           const int32_t* /*nodes*/) {
    inst->error.clear();
    auto it = inst->seqs.find(seq_id);
    if (it == inst->seqs.end()) return TROUPE_OK;
    sequence& s = *it->second;
    if (!s.pending) return TROUPE_OK;
    s.pending = false;
    if (s.n_seen == 0) {
        if (++inst->n_unseen_windows == max_unseen_windows && !inst->window_off) {
            inst->window_off = true;
            host_log::write(TROUPE_LOG_LEVEL_WARN, source,
                            "no logits rows came for %d lookahead windows in a row (the runner has no LOGITS tap, or "
                            "it verifies chains only): the window is off, n-grams from the text are still proposed",
                            max_unseen_windows);
        }
        return TROUPE_OK;
    }
    inst->n_unseen_windows = 0;
    if (s.n_seen < static_cast<int32_t>(s.outputs.size())) return TROUPE_OK;  // part of the window was cut
    return guarded(inst->error, [&] {
        s.window.advance(s.key0, s.outputs,
                         [&](int32_t key, const int32_t* continuation) { s.pool.add(key, continuation); });
        return TROUPE_OK;
    });
}

int32_t lookahead_max_nodes(troupe_plugin_instance* inst) {
    return inst->max_nodes;
}

// ---- taps: the argmax after each window column ---------------------------------------------------------------------

uint64_t lookahead_wanted(troupe_plugin_instance* inst) {
    return inst->params.lookahead ? TROUPE_TAP_BIT(TROUPE_TAP_LOGITS) : 0;
}

int32_t lookahead_observe(troupe_plugin_instance* inst, const troupe_tap_data* d) {
    if (d->tap != TROUPE_TAP_LOGITS || d->backend != TROUPE_BACKEND_CPU) return TROUPE_OK;
    if (!TROUPE_HAS_FIELD(d, troupe_tap_data, nodes) || d->nodes == nullptr || d->data == nullptr) return TROUPE_OK;
    sequence* s = nullptr;
    int64_t s_id = 0;
    for (int64_t row = 0; row < d->n_rows; ++row) {
        const int32_t node = d->nodes[row];
        if (node < 0) continue;
        if (s == nullptr || s_id != d->seq_ids[row]) {
            auto it = inst->seqs.find(d->seq_ids[row]);
            s = it == inst->seqs.end() ? nullptr : it->second.get();
            s_id = d->seq_ids[row];
            if (s == nullptr) continue;
        }
        if (!s->pending) continue;
        const int32_t local = node - s->first_node;
        if (local < 0 || local >= s->n_window_nodes) continue;
        const int32_t slot = s->slot_of[static_cast<size_t>(local)];
        if (slot < 0 || s->outputs[static_cast<size_t>(slot)] >= 0) continue;
        const float* logits = d->data + row * d->width;
        s->outputs[static_cast<size_t>(slot)] =
            static_cast<int32_t>(std::max_element(logits, logits + d->width) - logits);
        ++s->n_seen;
    }
    return TROUPE_OK;
}

// ---- plugin
// ----------------------------------------------------------------------------------------------------------

int32_t lookahead_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    return create_instance(out, [&](std::string& error) -> int32_t {
        param_reader reader(params);
        lookahead_params p;
        p.window = static_cast<int32_t>(reader.integer("window", 1, 64, p.window));
        p.ngram = static_cast<int32_t>(reader.integer("ngram", 3, 16, p.ngram));
        p.guesses = static_cast<int32_t>(reader.integer("guesses", 0, 64, p.guesses));
        p.lookahead = reader.boolean("lookahead", p.lookahead);
        p.pool_from_prompt = reader.boolean("pool_from_prompt", p.pool_from_prompt);
        p.seed = static_cast<uint64_t>(reader.integer("seed", 0, 2147483647, 0));
        if (!p.lookahead && p.guesses == 0) reader.fail("guesses", "must be at least 1 when lookahead is false, got 0");
        if (!finish_params(reader, {"window", "ngram", "guesses", "lookahead", "pool_from_prompt", "seed"}, error))
            return TROUPE_ERR_INVALID_PARAMS;
        auto* inst = new troupe_plugin_instance;
        inst->params = p;
        inst->max_nodes = inst->verification_nodes() + (p.lookahead ? jacobi_window::max_nodes(p.window, p.ngram) : 0);
        host_log::write(TROUPE_LOG_LEVEL_INFO, source,
                        "window %d, %d-grams, %d guesses: up to %d nodes per step (%d verification, %d lookahead)",
                        p.window, p.ngram, p.guesses, inst->max_nodes, inst->verification_nodes(),
                        inst->max_nodes - inst->verification_nodes());
        *out = inst;
        return TROUPE_OK;
    });
}

// Token bookkeeping on the host; the window needs the LOGITS tap, which only the CPU graph delivers yet (on CUDA it
// runs as a pool of the text's n-grams).
int32_t lookahead_score(int32_t backend) {
    return backend == TROUPE_BACKEND_CPU ? 50 : 10;
}

constexpr troupe_spec_ops lookahead_ops =
    spec_ops(lookahead_begin, lookahead_accepted, lookahead_end, lookahead_propose_batch, lookahead_max_nodes);

// LOGITS wanted only with the window on (lookahead_wanted), unlike last_layer_taps.
constexpr troupe_tap_ops lookahead_taps = {sizeof(troupe_tap_ops), TROUPE_TAP_OPS_VERSION, lookahead_wanted,
                                           lookahead_observe, 0};  // rows in host memory

constexpr troupe_plugin_descriptor lookahead_descriptor = spec_descriptor({
    .name = "lookahead",
    .version = "1.0.0",
    .description =
        "lookahead decoding: a Jacobi window of the target's own guesses feeds an n-gram pool verified as a tree",
    .score = lookahead_score,
    .create = lookahead_create,
    .ops = &lookahead_ops,
    .taps = &lookahead_taps,
});

}  // namespace

TROUPE_SPEC_PLUGIN_ENTRY(lookahead_descriptor)
