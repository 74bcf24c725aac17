// speculator: what a speculative-decoding strategy offers the core (a spec plugin, through plugin_speculator; tests
// implement it directly). It proposes, for each running sequence, a tree of tokens that may follow (a chain is the
// tree whose parents are -1, 0, 1, ...), optionally with the distribution each token was drawn from; the executor
// verifies every proposal against the target (core/sampling/draft_verify.h), so a speculator changes speed only,
// never what is emitted. The lifecycle calls (begin, accepted, end) let a strategy keep per-sequence state (a draft
// model's cache, an n-gram pool, the target's last hidden state). All calls come from the executor's lane.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/sampling/draft_tree.h"

namespace troupe {

// One running sequence the executor asks a proposal for (troupe_spec_request in the SDK).
struct draft_request {
    int64_t seq_id = 0;
    std::span<const int32_t> tokens;  // prompt and generated tokens; the last n_new run in the target this step
    int32_t n_new = 1;
    int32_t max_nodes = 0;                 // the proposal's capacity (KV rows reserved for it)
    int32_t max_depth = 0;                 // the deepest path verified
    float temperature = 0;                 // 0: greedy
    std::span<const int32_t> block_table;  // covers positions [0, tokens.size() + max_nodes)
    int32_t block_size = 0;
};

enum class sequence_end { finished, preempted };

class speculator {
public:
    virtual ~speculator() = default;
    virtual std::string name() const = 0;  // "spec/ngram"
    // The most nodes one proposal holds (the executor reserves KV rows for that many per sequence).
    virtual int32_t max_nodes() const = 0;
    virtual status begin(int64_t seq_id, std::span<const int32_t> prompt) = 0;
    // out[i] answers requests[i] (cleared first). An error drops this step's proposals, not the requests.
    virtual status propose(std::span<const draft_request> requests, std::span<draft_tree> out) = 0;
    // The step appended `tokens` to the sequence; nodes[i] is the proposal node tokens[i] was, -1 for the token the
    // target sampled itself (the last).
    virtual status accepted(int64_t seq_id, std::span<const int32_t> tokens, std::span<const int32_t> nodes) = 0;
    virtual void end(int64_t seq_id, sequence_end why) = 0;
};

// One sequence's proposal as a chain of tokens (the first path of its tree), for tools and tests that ask for one
// context at a time; the sequence id is 0 and nothing is cached for it.
inline result<std::vector<int32_t>> propose_chain(speculator& spec, std::span<const int32_t> context,
                                                  int32_t max_draft) {
    draft_request r;
    r.tokens = context;
    r.max_nodes = max_draft;
    r.max_depth = max_draft;
    draft_tree tree;
    if (status st = spec.propose(std::span<const draft_request>(&r, 1), std::span<draft_tree>(&tree, 1)); !st.ok())
        return st.err();
    keep_first_path(tree, tree.q.empty() ? 0 : tree.q.size() / std::max<size_t>(1, tree.size()));
    return tree.tokens;
}

}  // namespace troupe
