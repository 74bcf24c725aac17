#include "eagle_drafter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "plugins/common/dense_ops.h"

namespace troupe::eagle {

eagle_drafter::eagle_drafter(const eagle_shape& shape, eagle_weights weights, const drafter_params& p)
    : forward_(shape, std::move(weights)),
      p_(p),
      taps_(shape.dim),
      min_score_(p.min_confidence > 0.0f ? std::log(p.min_confidence) : -std::numeric_limits<float>::infinity()) {}

void eagle_drafter::begin(int64_t seq_id) {
    taps_.begin(seq_id);
    seqs_[seq_id] = sequence{};
}

void eagle_drafter::end(int64_t seq_id) {
    taps_.end(seq_id);
    seqs_.erase(seq_id);
}

int32_t eagle_drafter::context_rows(int64_t seq_id) const {
    auto it = seqs_.find(seq_id);
    return it == seqs_.end() ? 0 : it->second.cache.n_rows;
}

void eagle_drafter::accepted(int64_t seq_id, const int32_t* nodes, int32_t n) {
    taps_.accepted(seq_id, nodes, n);
    // Features the next catch-up cannot use go now, so steps run without drafts do not pile them up.
    if (const int32_t latest = taps_.latest(seq_id); p_.catch_up > 0 && latest >= 0)
        taps_.drop_below(seq_id, latest - p_.catch_up + 1);
}

// One batched forward over every request's missing context rows; a request whose row n - 2 is there gets a drafting
// entry whose roots come from that row's logits.
int32_t eagle_drafter::catch_up(const troupe_spec_request* requests, int32_t n, std::vector<drafting>& out,
                                const troupe_parallel* parallel) {
    const eagle_shape& sh = forward_.shape();
    std::vector<eagle_row> rows;
    std::vector<int32_t> last_row_of;  // [n] the row of position n - 2 per request, -1 when none
    last_row_of.assign(static_cast<size_t>(n), -1);
    for (int32_t i = 0; i < n; ++i) {
        const troupe_spec_request& q = requests[i];
        auto it = seqs_.find(q.seq_id);
        if (it == seqs_.end()) continue;
        sequence& s = it->second;
        const auto last = static_cast<int32_t>(q.n_tokens - 2);
        const int32_t first = p_.catch_up > 0 ? std::max(s.next_position, last - p_.catch_up + 1) : s.next_position;
        for (int32_t j = first; j <= last; ++j) {
            const float* h = taps_.at(q.seq_id, j);
            if (h == nullptr) continue;
            eagle_row row;
            row.token = q.tokens[j + 1];
            row.feature = h;
            row.position = j;
            row.cache = &s.cache;
            row.slot = s.cache.n_rows +
                       static_cast<int32_t>(std::count_if(rows.begin(), rows.end(),
                                                          [&](const eagle_row& r) { return r.cache == &s.cache; }));
            row.n_prefix = row.slot;
            row.want_logits = j == last;
            if (row.want_logits) last_row_of[static_cast<size_t>(i)] = static_cast<int32_t>(rows.size());
            rows.push_back(std::move(row));
        }
    }
    if (rows.empty()) return TROUPE_OK;
    for (const eagle_row& r : rows) r.cache->reserve_rows(r.slot + 1, sh.kv_width());
    std::vector<float> g(rows.size() * static_cast<size_t>(sh.dim));
    int32_t n_logits = 0;
    for (const eagle_row& r : rows) n_logits += r.want_logits ? 1 : 0;
    logits_.resize(static_cast<size_t>(n_logits) * static_cast<size_t>(sh.n_vocab));
    if (int32_t rc = forward_.run(rows, g.data(), logits_.data(), parallel); rc != TROUPE_OK) return rc;
    for (const eagle_row& r : rows) r.cache->n_rows = std::max(r.cache->n_rows, r.slot + 1);
    int32_t logit_row = 0;
    for (int32_t i = 0; i < n; ++i) {
        const troupe_spec_request& q = requests[i];
        auto it = seqs_.find(q.seq_id);
        if (it == seqs_.end()) continue;
        it->second.next_position = std::max(it->second.next_position, static_cast<int32_t>(q.n_tokens - 1));
        taps_.drop_below(q.seq_id, it->second.next_position);
        const int32_t r = last_row_of[static_cast<size_t>(i)];
        if (r < 0) continue;
        drafting d;
        d.request = i;
        d.seq = &it->second;
        d.n_context = it->second.cache.n_rows;
        const auto g_row = static_cast<int32_t>(g_.size() / static_cast<size_t>(sh.dim));
        g_.insert(g_.end(), g.begin() + static_cast<int64_t>(r) * sh.dim,
                  g.begin() + static_cast<int64_t>(r + 1) * sh.dim);
        add_children(d, -1, logits_.data() + static_cast<int64_t>(logit_row) * sh.n_vocab, g_row);
        ++logit_row;
        out.push_back(std::move(d));
    }
    return TROUPE_OK;
}

// The top-k tokens of a row's logits as candidates under `parent` (-1: roots), those at least min_confidence likely
// along their path; their rows will take g_row's output.
void eagle_drafter::add_children(drafting& d, int32_t parent, const float* logits, int32_t g_row) {
    const int32_t nv = forward_.shape().n_vocab;
    logp_.resize(static_cast<size_t>(nv));
    spec_common::log_softmax(logits, logp_.data(), nv);
    const float base = parent < 0 ? 0.0f : d.cands[static_cast<size_t>(parent)].score;
    const int32_t depth = parent < 0 ? 1 : d.cands[static_cast<size_t>(parent)].depth + 1;
    for (const auto& [token, lp] : spec_common::top_k(logp_.data(), nv, p_.topk)) {
        if (base + lp < min_score_) continue;
        d.frontier.push_back(static_cast<int32_t>(d.cands.size()));
        d.cands.push_back(candidate{token, parent, depth, base + lp, g_row});
    }
}

// The max_nodes best candidates (ties: shallower, then earlier), ordered by depth, into the proposal.
void eagle_drafter::finish(drafting& d, const troupe_spec_request& q, int32_t max_nodes, troupe_spec_proposal& p,
                           std::vector<float>& confidences) const {
    std::vector<int32_t> order(d.cands.size());
    std::iota(order.begin(), order.end(), 0);
    const auto better = [&](int32_t a, int32_t b) {
        const candidate &x = d.cands[static_cast<size_t>(a)], &y = d.cands[static_cast<size_t>(b)];
        if (x.score != y.score) return x.score > y.score;
        if (x.depth != y.depth) return x.depth < y.depth;
        return a < b;
    };
    std::sort(order.begin(), order.end(), better);
    std::vector<int32_t> kept;
    const int32_t cap = std::min(max_nodes, q.max_nodes);
    std::vector<char> in(d.cands.size(), 0);
    for (int32_t c : order) {
        if (static_cast<int32_t>(kept.size()) == cap) break;
        const candidate& x = d.cands[static_cast<size_t>(c)];
        if (x.depth > q.max_depth || (x.parent >= 0 && !in[static_cast<size_t>(x.parent)])) continue;
        kept.push_back(c);
        in[static_cast<size_t>(c)] = 1;
    }
    std::stable_sort(kept.begin(), kept.end(), [&](int32_t a, int32_t b) {
        return d.cands[static_cast<size_t>(a)].depth < d.cands[static_cast<size_t>(b)].depth;
    });
    std::vector<int32_t> node_of(d.cands.size(), -1);
    for (size_t i = 0; i < kept.size(); ++i) {
        const candidate& x = d.cands[static_cast<size_t>(kept[i])];
        node_of[static_cast<size_t>(kept[i])] = static_cast<int32_t>(i);
        p.tokens[i] = x.token;
        p.parents[i] = x.parent < 0 ? -1 : node_of[static_cast<size_t>(x.parent)];
        confidences.push_back(std::exp(x.score));
    }
    p.n_nodes = static_cast<int32_t>(kept.size());
}

std::pair<int32_t, int32_t> eagle_drafter::limits_for(int32_t n) const {
    if (!p_.shrink_with_batch || n <= 1) return {p_.depth, p_.max_nodes};
    int32_t log2n = 0;
    while ((int64_t{2} << log2n) <= n) ++log2n;
    const int32_t depth = std::max(1, p_.depth - log2n);
    const auto nodes = static_cast<int32_t>(int64_t{p_.max_nodes} * depth / p_.depth);
    return {depth, std::max(1, nodes)};
}

int32_t eagle_drafter::propose(const troupe_spec_request* requests, int32_t n, troupe_spec_proposal* out,
                               const troupe_parallel* parallel) {
    const eagle_shape& sh = forward_.shape();
    for (int32_t i = 0; i < n; ++i) {
        out[i].n_nodes = 0;
        out[i].has_q = 0;
    }
    g_.clear();
    confidences_.assign(static_cast<size_t>(n), {});
    std::vector<drafting> trees;
    if (int32_t rc = catch_up(requests, n, trees, parallel); rc != TROUPE_OK) return rc;
    const auto [depth, max_nodes] = limits_for(n);
    for (int32_t level = 1; level < depth && !trees.empty(); ++level) {
        // Each tree's top-k frontier nodes become rows.
        std::vector<eagle_row> rows;
        std::vector<std::pair<size_t, int32_t>> row_cand;  // (tree, candidate) of each row
        for (size_t t = 0; t < trees.size(); ++t) {
            drafting& d = trees[t];
            const troupe_spec_request& q = requests[d.request];
            std::vector<int32_t> front = d.frontier;
            d.frontier.clear();
            std::sort(front.begin(), front.end(), [&](int32_t a, int32_t b) {
                return d.cands[static_cast<size_t>(a)].score > d.cands[static_cast<size_t>(b)].score;
            });
            front.resize(std::min<size_t>(front.size(), static_cast<size_t>(p_.topk)));
            for (int32_t c : front) {
                candidate& x = d.cands[static_cast<size_t>(c)];
                if (x.depth >= q.max_depth) continue;  // its children could not be verified
                eagle_row row;
                row.token = x.token;
                row.feature = g_.data() + static_cast<int64_t>(x.g_row) * sh.dim;
                row.position = static_cast<int32_t>(q.n_tokens) - 2 + x.depth;
                row.cache = &d.seq->cache;
                row.n_prefix = d.n_context;
                for (int32_t up = x.parent; up >= 0; up = d.cands[static_cast<size_t>(up)].parent)
                    row.extra.push_back(d.cands[static_cast<size_t>(up)].slot);
                row.slot =
                    d.n_context + static_cast<int32_t>(std::count_if(d.cands.begin(), d.cands.end(),
                                                                     [](const candidate& y) { return y.slot >= 0; }));
                x.slot = row.slot;
                row.want_logits = true;
                row.cache->reserve_rows(row.slot + 1, sh.kv_width());
                rows.push_back(std::move(row));
                row_cand.emplace_back(t, c);
            }
        }
        if (rows.empty()) break;
        std::vector<float> g(rows.size() * static_cast<size_t>(sh.dim));
        logits_.resize(rows.size() * static_cast<size_t>(sh.n_vocab));
        if (int32_t rc = forward_.run(rows, g.data(), logits_.data(), parallel); rc != TROUPE_OK) return rc;
        for (size_t r = 0; r < rows.size(); ++r) {
            const auto g_row = static_cast<int32_t>(g_.size() / static_cast<size_t>(sh.dim));
            g_.insert(g_.end(), g.begin() + static_cast<int64_t>(r) * sh.dim,
                      g.begin() + static_cast<int64_t>(r + 1) * sh.dim);
            auto [t, c] = row_cand[r];
            add_children(trees[t], c, logits_.data() + static_cast<int64_t>(r) * sh.n_vocab, g_row);
        }
    }
    for (drafting& d : trees) {
        finish(d, requests[d.request], max_nodes, out[d.request], confidences_[static_cast<size_t>(d.request)]);
        d.seq->cache.n_rows = d.n_context;  // the draft rows go
    }
    return TROUPE_OK;
}

}  // namespace troupe::eagle
