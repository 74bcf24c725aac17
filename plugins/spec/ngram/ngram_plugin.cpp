// spec/ngram: prompt-lookup drafting. The last k tokens of the context are looked up earlier in the
// context (the most recent earlier occurrence wins), for k from ngram_max down to ngram_min; the
// tokens that followed that occurrence are the draft. The core verifies every draft token.
//
//   context: ... a b c d x y ... a b c   (k = 3, "a b c" seen before)  ->  draft: d x y ...
//
// Spec ops version 2 (propose_batch, max_nodes): with branches > 1 the continuations of further earlier
// occurrences (latest first, longest suffix first) become more branches of one tree, merged where they share a
// prefix (draft_trie.h), up to branches distinct continuations and the request's max_nodes. The first path is
// always the version-1 draft above, so branches: 1 proposes exactly what version 1 did. Drafts are deterministic
// (no q rows): the core's verification keeps greedy output identical and sampled output exact.
//
// Parameters:
//   ngram_min: 1..16 (default 1)   shortest suffix to look up
//   ngram_max: 1..16 (default 3)   longest suffix to look up; >= ngram_min
//   max_draft: 1..16 (default 8)   most tokens proposed per call (the caller may ask for fewer): a branch's depth
//   branches:  1..16 (default 1)   most distinct continuations per proposal (max_nodes = max_draft * branches)
#include <troupe/plugin.h>

#include <algorithm>
#include <string>

#include "plugins/common/plugin_support.h"
#include "plugins/common/spec_plugin_support.h"
#include "plugins/spec/ngram/draft_trie.h"

namespace {

using namespace troupe::plugin_support;

constexpr const char* source = "spec/ngram";

}  // namespace

struct troupe_plugin_instance {
    int32_t ngram_min = 1;
    int32_t ngram_max = 3;
    int32_t max_draft = 8;
    int32_t branches = 1;
    std::string error;
};

namespace {

// Start of the most recent occurrence of tokens[n - k, n) that begins before n - k, or -1.
int64_t find_earlier(const int32_t* tokens, int64_t n, int32_t k) {
    const int32_t* suffix = tokens + (n - k);
    for (int64_t i = n - k - 1; i >= 0; --i) {
        if (std::equal(suffix, suffix + k, tokens + i)) return i;
    }
    return -1;
}

int32_t ngram_propose(troupe_plugin_instance* inst, const int32_t* tokens, int64_t n, int32_t max_draft, int32_t* out) {
    inst->error.clear();
    if (n < 0 || max_draft < 0 || (n > 0 && tokens == nullptr) || (max_draft > 0 && out == nullptr)) {
        inst->error = "propose got n " + std::to_string(n) + ", max_draft " + std::to_string(max_draft) +
                      " (must be >= 0, with buffers for them)";
        return -TROUPE_ERR_INVALID_ARGUMENT;
    }
    const int32_t limit = std::min(max_draft, inst->max_draft);
    if (limit == 0) return 0;
    for (int32_t k = inst->ngram_max; k >= inst->ngram_min; --k) {
        if (n < static_cast<int64_t>(k) + 1) continue;
        const int64_t at = find_earlier(tokens, n, k);
        if (at < 0) continue;
        const int64_t from = at + k;  // < n, since at < n - k
        const int32_t n_draft = static_cast<int32_t>(std::min<int64_t>(limit, n - from));
        std::copy(tokens + from, tokens + from + n_draft, out);
        return n_draft;
    }
    return 0;
}

// One request's tree: the continuations of earlier occurrences of the context's suffix, longest suffix first, latest
// occurrence first, each at most max_draft deep, merged into a trie of at most `branches` distinct continuations.
int32_t propose_tree(const troupe_plugin_instance* inst, const troupe_spec_request& r, troupe_spec_proposal& p) {
    const int32_t capacity = std::min(r.max_nodes, inst->max_draft * inst->branches);
    const int32_t depth = std::min({inst->max_draft, r.max_depth > 0 ? r.max_depth : inst->max_draft, capacity});
    troupe::spec_plugins::draft_trie trie(p.tokens, p.parents, capacity);
    const int32_t* tokens = r.tokens;
    const int64_t n = r.n_tokens;
    int32_t n_branches = 0;
    for (int32_t k = inst->ngram_max; k >= inst->ngram_min && n_branches < inst->branches && !trie.full(); --k) {
        if (n < static_cast<int64_t>(k) + 1) continue;
        const int32_t* suffix = tokens + (n - k);
        for (int64_t at = n - k - 1; at >= 0 && n_branches < inst->branches && !trie.full(); --at) {
            if (!std::equal(suffix, suffix + k, tokens + at)) continue;
            const int64_t from = at + k;  // < n, since at < n - k
            const auto len = static_cast<int32_t>(std::min<int64_t>(depth, n - from));
            if (trie.add(tokens + from, len) > 0) ++n_branches;
        }
    }
    p.n_nodes = trie.size();
    p.has_q = 0;
    return TROUPE_OK;
}

int32_t ngram_propose_batch(troupe_plugin_instance* inst, const troupe_spec_request* requests, int32_t n,
                            troupe_spec_proposal* out, const troupe_parallel* /*parallel*/) {
    return instance_op(inst, [&]() -> int32_t {
        if (!batch_args_valid(requests, n, out, inst->error)) return TROUPE_ERR_INVALID_ARGUMENT;
        for (int32_t i = 0; i < n; ++i) {
            if (!start_proposal(i, requests[i], out[i], inst->error)) return TROUPE_ERR_INVALID_ARGUMENT;
            if (requests[i].max_nodes > 0) propose_tree(inst, requests[i], out[i]);
        }
        return TROUPE_OK;
    });
}

int32_t ngram_max_nodes(troupe_plugin_instance* inst) {
    return inst->max_draft * inst->branches;
}

int32_t ngram_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    return create_instance(out, [&](std::string& error) -> int32_t {
        param_reader reader(params);
        const auto ngram_min = static_cast<int32_t>(reader.integer("ngram_min", 1, 16, 1));
        const auto ngram_max = static_cast<int32_t>(reader.integer("ngram_max", 1, 16, 3));
        const auto max_draft = static_cast<int32_t>(reader.integer("max_draft", 1, 16, 8));
        const auto branches = static_cast<int32_t>(reader.integer("branches", 1, 16, 1));
        if (ngram_min > ngram_max) {
            reader.fail("ngram_min", "must be at most ngram_max (" + std::to_string(ngram_max) + "), got " +
                                         std::to_string(ngram_min));
        }
        if (!finish_params(reader, {"ngram_min", "ngram_max", "max_draft", "branches"}, error))
            return TROUPE_ERR_INVALID_PARAMS;
        auto* inst = new troupe_plugin_instance{ngram_min, ngram_max, max_draft, branches, {}};
        host_log::write(TROUPE_LOG_LEVEL_INFO, source, "n-grams %d..%d, up to %d draft tokens in %d branch(es)",
                        ngram_min, ngram_max, max_draft, branches);
        *out = inst;
        return TROUPE_OK;
    });
}

// Pure token bookkeeping: runs wherever the host does.
int32_t ngram_score(int32_t backend) {
    return 50;
}

// Stateless: no lifecycle; the context in each request is all it looks at. Version-1 hosts get propose.
constexpr troupe_spec_ops ngram_ops =
    spec_ops(ngram_propose, nullptr, nullptr, nullptr, ngram_propose_batch, ngram_max_nodes);

constexpr troupe_plugin_descriptor ngram_descriptor = spec_descriptor({
    .name = "ngram",
    .version = "2.0.0",
    .description =
        "prompt-lookup drafts: the tokens that followed the latest earlier occurrence of the context's last n-gram",
    .score = ngram_score,
    .create = ngram_create,
    .ops = &ngram_ops,
    .taps = nullptr,
});

}  // namespace

TROUPE_SPEC_PLUGIN_ENTRY(ngram_descriptor)
