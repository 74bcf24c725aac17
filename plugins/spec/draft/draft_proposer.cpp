#include "plugins/spec/draft/draft_proposer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace spec_draft {
namespace {

// splitmix64: a sequence's seed from the instance's seed and the sequence id.
uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// The drafter's step for request q: n tokens from `tokens` at positions pos0.., written in q's blocks.
troupe_model_step step_of(const troupe_spec_request& q, const int32_t* tokens, int64_t n, int64_t pos0) {
    troupe_model_step step{};
    step.struct_size = sizeof step;
    step.version = TROUPE_MODEL_STEP_VERSION;
    step.seq_id = q.seq_id;
    step.tokens = tokens;
    step.n_tokens = static_cast<int32_t>(n);
    step.pos0 = static_cast<int32_t>(pos0);
    step.block_table = q.block_table;
    step.n_blocks = q.n_blocks;
    return step;
}

}  // namespace

draft_proposer::draft_proposer(const troupe_model_services* services, troupe_model* model,
                               const troupe_model_info& info, draft_options options)
    : services_(services), model_(model), info_(info), options_(options) {}

draft_proposer::sequence& draft_proposer::state_of(int64_t seq_id) {
    auto it = seqs_.find(seq_id);
    if (it != seqs_.end()) return it->second;
    sequence& s = seqs_[seq_id];
    s.k = options_.adaptive ? (options_.max_draft + 1) / 2 : options_.max_draft;
    s.acc = acceptance(all_acc_.alpha(), 2.0, 0.9);
    s.rng.seed(mix(options_.seed ^ mix(static_cast<uint64_t>(seq_id))));
    return s;
}

void draft_proposer::begin(int64_t seq_id) {
    seqs_.erase(seq_id);
    state_of(seq_id);  // nothing cached: the first proposal catches up on the whole context
}

int32_t draft_proposer::pick(const float* logits, float temperature, sequence& s, float* q_row) {
    const int32_t n_vocab = info_.n_vocab;
    if (temperature <= 0 || q_row == nullptr) {
        return static_cast<int32_t>(std::max_element(logits, logits + n_vocab) - logits);  // first maximum
    }
    // q = softmax(logits / T); the draft is drawn from exactly the row handed to the verifier.
    const float max = *std::max_element(logits, logits + n_vocab);
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; ++i) {
        q_row[i] = std::exp((logits[i] - max) / temperature);
        sum += q_row[i];
    }
    const auto inv = static_cast<float>(1.0 / sum);
    double total = 0;
    for (int32_t i = 0; i < n_vocab; ++i) {
        q_row[i] *= inv;
        total += q_row[i];
    }
    return draw(q_row, total, s);
}

int32_t draft_proposer::draw(const float* q_row, double total, sequence& s) {
    const int32_t n_vocab = info_.n_vocab;
    const double u = std::uniform_real_distribution<double>(0.0, total)(s.rng);
    double acc = 0;
    int32_t last_positive = 0;
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (q_row[i] <= 0) continue;
        last_positive = i;
        acc += q_row[i];
        if (u < acc) return i;
    }
    return last_positive;  // u at the very top of the range (rounding)
}

int32_t draft_proposer::forward(int32_t n_steps) {
    logits_.resize(static_cast<size_t>(n_steps) * static_cast<size_t>(info_.n_vocab));
    const int32_t rc = services_->model_forward(services_->host_ctx, model_, steps_.data(), n_steps, logits_.data());
    if (rc != TROUPE_OK)
        error_ = std::string("the drafter's forward failed: ") + services_->last_error(services_->host_ctx);
    return rc;
}

int32_t draft_proposer::length_for(sequence& s, int32_t n_requests) {
    if (!options_.adaptive) return options_.max_draft;
    ++s.n_proposals;
    int32_t k = s.k;
    if (cost_.ready()) {
        k = best_length(s.acc.alpha(), cost_.fixed() / std::max(1, n_requests),
                        cost_.per_node() + draft_seconds_per_token_, options_.max_draft);
    }
    // Every eighth proposal one more or one fewer: the fit keeps seeing steps of different sizes, and a sequence
    // whose drafts were turned off (k = 0) keeps measuring its acceptance.
    if (s.n_proposals % 8 == 0) k += (s.n_proposals / 8) % 2 == 0 || k == 0 ? 1 : -1;
    return std::clamp(k, 0, options_.max_draft);
}

int32_t draft_proposer::propose(const troupe_spec_request* requests, int32_t n, troupe_spec_proposal* out) {
    const clock::time_point start = clock::now();
    // A decode step measures the cost of the one before when both ran one token for the same sequences (a prefill, a
    // sequence arriving or leaving, a pause between requests: not a decode step's cost).
    bool decode = n > 0;
    bool same = static_cast<size_t>(n) == last_seqs_.size();
    for (int32_t r = 0; r < n; ++r) {
        decode = decode && requests[r].n_new == 1;
        same = same && last_seqs_[static_cast<size_t>(r)] == requests[r].seq_id;
    }
    last_seqs_.resize(static_cast<size_t>(n));
    for (int32_t r = 0; r < n; ++r) last_seqs_[static_cast<size_t>(r)] = requests[r].seq_id;
    if (last_was_decode_ && decode && same) {
        cost_.add(static_cast<double>(last_nodes_), std::chrono::duration<double>(start - last_end_).count());
    }
    last_was_decode_ = false;
    const int32_t rc = propose_chains(requests, n, out);
    const clock::time_point end = clock::now();
    int64_t nodes = 0;
    for (int32_t r = 0; r < n && rc == TROUPE_OK; ++r) nodes += out[r].n_nodes;
    if (nodes > 0) {
        const double per_token = std::chrono::duration<double>(end - start).count() / static_cast<double>(nodes);
        draft_seconds_per_token_ =
            draft_seconds_per_token_ == 0 ? per_token : 0.9 * draft_seconds_per_token_ + 0.1 * per_token;
    }
    last_end_ = end;
    last_nodes_ = nodes;
    last_was_decode_ = decode && rc == TROUPE_OK;
    return rc;
}

int32_t draft_proposer::propose_chains(const troupe_spec_request* requests, int32_t n, troupe_spec_proposal* out) {
    error_.clear();
    k_of_.assign(static_cast<size_t>(n), 0);
    extra_of_.assign(static_cast<size_t>(n), 0);
    siblings_.resize(static_cast<size_t>(n) * options_.branch);
    steps_.clear();
    step_req_.clear();
    int32_t k_max = 0;
    for (int32_t r = 0; r < n; ++r) {
        const troupe_spec_request& q = requests[r];
        out[r].n_nodes = 0;
        out[r].has_q = 0;
        // No block table (a caller asking for one context outside the engine): the drafter has nowhere to run.
        if (q.block_table == nullptr || q.n_blocks <= 0 || q.block_size <= 0 || q.n_tokens <= 0) continue;
        sequence& s = state_of(q.seq_id);
        s.n_at_propose = -1;
        const int64_t len = q.n_tokens;
        // The drafter runs positions up to len + k - 2: inside its context and the blocks the step reserved.
        const int64_t room = std::min<int64_t>(info_.n_ctx, static_cast<int64_t>(q.n_blocks) * q.block_size);
        int64_t k =
            std::min<int64_t>({length_for(s, n), std::max(1, q.max_nodes - (options_.branch - 1)),
                               q.max_depth > 0 ? q.max_depth : q.max_nodes, options_.max_draft, room - len + 1});
        if (k <= 0) continue;
        s.cached = std::clamp<int64_t>(s.cached, 0, len - 1);
        steps_.push_back(step_of(q, q.tokens + s.cached, len - s.cached, s.cached));
        step_req_.push_back(r);
        k_of_[static_cast<size_t>(r)] = static_cast<int32_t>(k);
        extra_of_[static_cast<size_t>(r)] =
            static_cast<int32_t>(std::min<int64_t>(options_.branch - 1, q.max_nodes - k));
        k_max = std::max(k_max, static_cast<int32_t>(k));
    }
    if (steps_.empty()) return TROUPE_OK;
    auto q_row = [&](int32_t r, int32_t node) -> float* {
        const troupe_spec_proposal& p = out[r];
        if (requests[r].temperature <= 0 || p.q == nullptr || p.n_vocab != info_.n_vocab) return nullptr;
        return p.q + static_cast<size_t>(node) * static_cast<size_t>(info_.n_vocab);
    };
    // Draft position 1: every sequence's catch-up on the context, then the first draft.
    if (int32_t rc = forward(static_cast<int32_t>(steps_.size())); rc != TROUPE_OK) return rc;
    for (size_t i = 0; i < steps_.size(); ++i) {
        const int32_t r = step_req_[i];
        sequence& s = seqs_.at(requests[r].seq_id);
        s.cached = requests[r].n_tokens;
        float* q = q_row(r, 0);
        out[r].tokens[0] = pick(logits_.data() + i * static_cast<size_t>(info_.n_vocab), requests[r].temperature, s, q);
        out[r].parents[0] = -1;
        out[r].n_nodes = 1;
        out[r].has_q = q != nullptr ? 1 : 0;
        s.n_at_propose = requests[r].n_tokens;
        s.n_proposed = 1;
        pick_siblings(r, logits_.data() + i * static_cast<size_t>(info_.n_vocab), out[r].tokens[0], q, s);
    }
    // Draft positions 2..k_max: one token per sequence still drafting, all in one forward.
    for (int32_t j = 2; j <= k_max; ++j) {
        steps_.clear();
        step_req_.clear();
        for (int32_t r = 0; r < n; ++r) {
            if (k_of_[static_cast<size_t>(r)] < j) continue;
            const troupe_spec_request& q = requests[r];
            steps_.push_back(step_of(q, out[r].tokens + (j - 2), 1, q.n_tokens + j - 2));
            step_req_.push_back(r);
        }
        if (int32_t rc = forward(static_cast<int32_t>(steps_.size())); rc != TROUPE_OK) {
            for (int32_t r = 0; r < n; ++r) seqs_[requests[r].seq_id].n_at_propose = -1;  // rows past n unknown
            return rc;
        }
        for (size_t i = 0; i < steps_.size(); ++i) {
            const int32_t r = step_req_[i];
            sequence& s = seqs_.at(requests[r].seq_id);
            float* q = q_row(r, j - 1);
            out[r].tokens[j - 1] =
                pick(logits_.data() + i * static_cast<size_t>(info_.n_vocab), requests[r].temperature, s, q);
            out[r].parents[j - 1] = j - 2;
            out[r].n_nodes = j;
            s.n_proposed = j;
        }
    }
    // The first draft's siblings (params.branch) after the chain: more roots, each a leaf.
    for (int32_t r = 0; r < n; ++r) {
        troupe_spec_proposal& p = out[r];
        const int32_t n_extra = extra_of_[static_cast<size_t>(r)];
        for (int32_t e = 0; e < n_extra; ++e) {
            const int32_t node = p.n_nodes;
            p.tokens[node] = siblings_[static_cast<size_t>(r) * options_.branch + static_cast<size_t>(e)];
            p.parents[node] = -1;
            if (p.has_q != 0) {  // an independent draw from the same row as node 0
                std::copy(p.q, p.q + info_.n_vocab, p.q + static_cast<size_t>(node) * info_.n_vocab);
            }
            p.n_nodes = node + 1;
        }
    }
    return TROUPE_OK;
}

void draft_proposer::pick_siblings(int32_t r, const float* logits, int32_t first, const float* q_row, sequence& s) {
    const int32_t n_extra = extra_of_[static_cast<size_t>(r)];
    if (n_extra <= 0) return;
    int32_t* out = siblings_.data() + static_cast<size_t>(r) * options_.branch;
    if (q_row != nullptr) {
        double total = 0;
        for (int32_t i = 0; i < info_.n_vocab; ++i) total += q_row[i];
        for (int32_t e = 0; e < n_extra; ++e) out[e] = draw(q_row, total, s);  // duplicates allowed: exact
        return;
    }
    // Greedy: the next best tokens after the first (ties: the lower id first, as the first draft was chosen).
    order_.resize(static_cast<size_t>(info_.n_vocab));
    for (int32_t i = 0; i < info_.n_vocab; ++i) order_[static_cast<size_t>(i)] = i;
    const auto better = [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; };
    const auto top = static_cast<std::ptrdiff_t>(std::min(n_extra + 1, info_.n_vocab));
    std::partial_sort(order_.begin(), order_.begin() + top, order_.end(), better);
    int32_t e = 0;
    for (std::ptrdiff_t i = 0; i < top && e < n_extra; ++i) {
        if (order_[static_cast<size_t>(i)] != first) out[e++] = order_[static_cast<size_t>(i)];
    }
    extra_of_[static_cast<size_t>(r)] = e;
}

void draft_proposer::accepted(int64_t seq_id, const int32_t* nodes, int32_t n) {
    auto it = seqs_.find(seq_id);
    if (it == seqs_.end()) return;
    sequence& s = it->second;
    if (s.n_at_propose < 0) return;  // no drafts this step: the drafter ran nothing for it
    int32_t m = 0;                   // drafts accepted (the path's nodes), then the target's own token
    for (int32_t i = 0; i < n; ++i) m += nodes[i] >= 0 ? 1 : 0;
    int32_t on_chain = 0;  // how much of the path is the chain's nodes 0, 1, ... (not a sibling root)
    while (on_chain < n && on_chain < s.n_proposed && nodes[on_chain] == on_chain) ++on_chain;
    // Rows n .. n + proposed - 2 hold the chain's drafts 0 .. proposed - 2; those the target kept stay valid.
    s.cached = s.n_at_propose + std::min(on_chain, s.n_proposed - 1);
    n_drafted_ += s.n_proposed;
    n_accepted_ += m;
    s.acc.add(m, s.n_proposed);
    all_acc_.add(m, s.n_proposed);
    if (options_.adaptive) {
        if (m == s.n_proposed) s.k = std::min(s.k + 1, options_.max_draft);
        if (2 * m < s.n_proposed) s.k = std::max(s.k - 1, 1);
    }
    s.n_at_propose = -1;
}

}  // namespace spec_draft

namespace spec_draft {

std::string draft_proposer::figures() const {
    char text[200];
    std::snprintf(text, sizeof text,
                  "step %.2f ms + %.2f ms per node (%s), drafter %.3f ms per token, acceptance %.2f per position",
                  cost_.fixed() * 1e3, cost_.per_node() * 1e3, cost_.ready() ? "fitted" : "not fitted yet",
                  draft_seconds_per_token_ * 1e3, all_acc_.alpha());
    return text;
}

}  // namespace spec_draft
