// eagle_drafter: spec/eagle's per-sequence state and its proposals, batched over the running sequences.
//
// Context rows: the target delivers h_j for each position j it runs (tap_features). Row j of the EAGLE layer takes
// (embed(t_{j+1}), h_j) at position j, so it can be computed once t_{j+1} is known; at each proposal the drafter
// catches up with every context row j <= n - 2 whose feature arrived (n = the context's length), in one batched
// forward over all sequences. Rows whose feature never arrived (a prefix served from cache) are skipped, and so
// are all but the newest `catch_up` of the rows missing.
//
// Draft tree (EAGLE-2's dynamic tree): row n - 2's logits draft t_n; its top-k tokens are the roots, each scored by
// its log-probability. Then, `depth - 1` times: the top-k frontier nodes by cumulative log-probability are expanded,
// each by one draft row (embed(node's token), g of its parent's row) at position n - 2 + depth(node) that attends to
// the context and its ancestors' rows; each gives its top-k children (score = parent's + log p(child)), which form
// the next frontier. Finally the max_nodes best-scored nodes of all are kept (a child never outscores its parent, so
// they form a tree) and ordered by depth. The draft rows are dropped from the cache after the proposal: the context
// keeps only rows computed from the target's own features.
//
// Drafts are deterministic (no q rows): the host's rule for deterministic drafts keeps sampled output exact.
#pragma once

#include <troupe/spec.h>

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "eagle_forward.h"
#include "plugins/common/tap_features.h"

namespace troupe::eagle {

struct drafter_params {
    // Defaults for the CPU: a chain (top-1 at each level). A node costs a good part of a token to verify and each
    // level one forward of the layer, so wide trees lose (grown 110M, batch 1, 4 / 2 / top-2 1.16-1.29x against 2 /
    // 2 / 1 1.32-1.55x; EAGLE-2's 48 / 6 / 6 0.36x). How deep pays follows the layer's acceptance: with the layer
    // distilled from 3x the openings for 1200 steps (distill's defaults since 2026-12-03; chain acceptance .87 .79
    // .62 .49 in the bench against .64 .43) and its 8-bit rows in VNNI panels, the medians of alternated runs of
    // `troupe bench --spec eagle` on the grown 110M Q8_0 were depth 2: 1.8x, 3: 1.8x, 4: 2.0x, 5: 2.17x (7 runs
    // 1.76-2.56x), 6: 2.16x; 4 / 6 / top-2 1.58-1.74x.
    int32_t max_nodes = 5;
    int32_t depth = 5;
    // With n sequences in one proposal the depth is depth - floor(log2 n) (at least 1) and max_nodes shrinks in
    // proportion: on the CPU a batch's verification grows compute-bound, and the server's draft controller probes
    // drafting at every batch size. Through the server on the grown 110M at 16 streams (spec_serve.sh, 3 rounds),
    // 5-deep chains for every sequence made the controller's probes cost 7-12% of the throughput against no
    // speculation (adaptive 0.88x, 0.93x; always drafting 0.61x), 2-deep ones 1.03x (always 0.89x).
    bool shrink_with_batch = true;
    int32_t topk = 1;
    // The most context rows one proposal computes, the newest (0: all). Catching up is the layer's forward over
    // every row not yet computed: 1-3 rows a step while drafting, but a whole prompt after prefill and every token
    // of a stretch the draft controller ran without drafts, which its probe then pays (on the grown 110M at 4
    // streams: adaptive 0.93x of no speculation with all rows, 0.96-0.97x with 16 or 8). The rows skipped are
    // left out of the layer's attention, as a prefix served from cache is; the layer trains on openings of
    // 8-250 tokens, and 16 rows drafted as well as all on prompts of 150 tokens (tau 2.29 against 2.22).
    int32_t catch_up = 16;
    // The least cumulative draft probability (the product of the draft's probabilities along a node's path) for
    // which a node is drafted further and proposed (0: every node). A node costs a forward of the layer per level
    // and a row of the target's verification, and yields a token about as often as its cumulative probability
    // says, so deep nodes of an unsure chain cost more than they return: EAGLE-2 stops expanding there.
    float min_confidence = 0.0f;
};

class eagle_drafter {
public:
    eagle_drafter(const eagle_shape& shape, eagle_weights weights, const drafter_params& p);
    const eagle_weights& weights() const { return forward_.weights(); }

    const drafter_params& params() const { return p_; }
    // The layer's context rows computed for the sequence (its cache rows outside a proposal), 0 if unknown.
    int32_t context_rows(int64_t seq_id) const;
    spec_common::tap_features& taps() { return taps_; }

    void begin(int64_t seq_id);
    void end(int64_t seq_id);
    void accepted(int64_t seq_id, const int32_t* nodes, int32_t n);
    int32_t propose(const troupe_spec_request* requests, int32_t n, troupe_spec_proposal* out,
                    const troupe_parallel* parallel);
    // The depth and node cap of a proposal for n sequences (shrink_with_batch).
    std::pair<int32_t, int32_t> limits_for(int32_t n) const;
    // The cumulative draft probability of each node of request i's proposal in the last propose (node order).
    const std::vector<float>& confidences(int32_t i) const { return confidences_[static_cast<size_t>(i)]; }

private:
    struct sequence {
        eagle_cache cache;
        int32_t next_position = 0;  // context rows of positions below this are done (or skipped)
    };
    struct candidate {
        int32_t token;
        int32_t parent;     // candidate index, -1 for a root
        int32_t depth;      // 1 for a root
        float score;        // cumulative log-probability
        int32_t g_row;      // index into g_ of the row whose output feeds this candidate's row
        int32_t slot = -1;  // the cache row of this candidate's own row once expanded
    };
    struct drafting {  // one request's tree in the making
        int32_t request;
        sequence* seq;
        int32_t n_context;  // cache rows of the context
        std::vector<candidate> cands;
        std::vector<int32_t> frontier;
    };

    int32_t catch_up(const troupe_spec_request* requests, int32_t n, std::vector<drafting>& out,
                     const troupe_parallel* parallel);
    void add_children(drafting& d, int32_t parent, const float* logits, int32_t g_row);
    void finish(drafting& d, const troupe_spec_request& q, int32_t max_nodes, troupe_spec_proposal& p,
                std::vector<float>& confidences) const;

    eagle_forward forward_;
    drafter_params p_;
    spec_common::tap_features taps_;
    std::unordered_map<int64_t, sequence> seqs_;
    std::vector<float> g_;                         // [rows of this proposal, dim] outputs kept for the next level
    std::vector<float> logits_;                    // [rows, n_vocab]
    std::vector<float> logp_;                      // [n_vocab]
    float min_score_ = 0.0f;                       // log(min_confidence), -inf for 0
    std::vector<std::vector<float>> confidences_;  // [requests of the last propose][its nodes]
};

}  // namespace troupe::eagle
