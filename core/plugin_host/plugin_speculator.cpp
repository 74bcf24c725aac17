#include "core/plugin_host/plugin_speculator.h"

#include <algorithm>
#include <cstddef>

namespace troupe {

plugin_speculator::plugin_speculator(std::shared_ptr<plugin_instance> instance)
    : instance_(std::move(instance)), ops_(instance_->spec_ops()) {
    if (has(offsetof(troupe_spec_ops, max_nodes)) && ops_->max_nodes != nullptr) {
        max_nodes_ = std::max<int32_t>(0, ops_->max_nodes(instance_->handle()));
    }
}

void plugin_speculator::use_pool(cpu::thread_pool& pool) {
    parallel_for_ = pool.as_parallel_for();
    bridge_ = std::make_unique<parallel_bridge>(parallel_for_, &pool);
}

bool plugin_speculator::has(size_t offset) const {
    return ops_->struct_size >= offset + sizeof(void*);
}

std::string plugin_speculator::name() const {
    return instance_->label();
}

status plugin_speculator::begin(int64_t seq_id, std::span<const int32_t> prompt) {
    if (!has(offsetof(troupe_spec_ops, begin)) || ops_->begin == nullptr) return {};
    const int32_t rc = ops_->begin(instance_->handle(), seq_id, prompt.data(), static_cast<int64_t>(prompt.size()));
    if (rc != TROUPE_OK) return instance_->op_error("begin", rc);
    return {};
}

status plugin_speculator::accepted(int64_t seq_id, std::span<const int32_t> tokens, std::span<const int32_t> nodes) {
    if (!has(offsetof(troupe_spec_ops, accepted)) || ops_->accepted == nullptr) return {};
    const int32_t rc =
        ops_->accepted(instance_->handle(), seq_id, tokens.data(), static_cast<int32_t>(tokens.size()), nodes.data());
    if (rc != TROUPE_OK) return instance_->op_error("accepted", rc);
    return {};
}

void plugin_speculator::end(int64_t seq_id, sequence_end why) {
    if (!has(offsetof(troupe_spec_ops, end)) || ops_->end == nullptr) return;
    ops_->end(instance_->handle(), seq_id,
              why == sequence_end::preempted ? TROUPE_SPEC_END_PREEMPTED : TROUPE_SPEC_END_FINISHED);
}

status plugin_speculator::check(const draft_request& request, const draft_tree& tree) const {
    const auto fail = [&](const std::string& what) {
        return make_error("plugin " + instance_->label() + ": proposal for sequence " + std::to_string(request.seq_id) +
                          ": " + what);
    };
    if (static_cast<int32_t>(tree.size()) > request.max_nodes) {
        return fail(std::to_string(tree.size()) + " nodes, more than the " + std::to_string(request.max_nodes) +
                    " asked for");
    }
    for (size_t i = 0; i < tree.size(); ++i) {
        if (tree.tokens[i] < 0 || (n_vocab_ > 0 && tree.tokens[i] >= n_vocab_)) {
            return fail("node " + std::to_string(i) + " has token " + std::to_string(tree.tokens[i]) +
                        ", outside the vocabulary [0, " + std::to_string(n_vocab_) + ")");
        }
        if (tree.parents[i] < -1 || tree.parents[i] >= static_cast<int32_t>(i)) {
            return fail("node " + std::to_string(i) + " has parent " + std::to_string(tree.parents[i]) +
                        " (parents are -1 or an earlier node)");
        }
    }
    return {};
}

status plugin_speculator::propose_v1(std::span<const draft_request> requests, std::span<draft_tree> out) {
    for (size_t r = 0; r < requests.size(); ++r) {
        const draft_request& q = requests[r];
        draft_tree& t = out[r];
        const int32_t max_draft = std::min(q.max_nodes, max_draft_v1);
        if (max_draft <= 0) continue;
        t.tokens.resize(static_cast<size_t>(max_draft));
        const int32_t n = ops_->propose(instance_->handle(), q.tokens.data(), static_cast<int64_t>(q.tokens.size()),
                                        max_draft, t.tokens.data());
        if (n < 0) {
            t.clear();
            return instance_->op_error("propose", -n);
        }
        if (n > max_draft) {
            t.clear();
            return make_error("plugin " + instance_->label() + ": propose returned " + std::to_string(n) +
                              " tokens, more than the " + std::to_string(max_draft) + " asked for");
        }
        t.tokens.resize(static_cast<size_t>(n));
        for (int32_t i = 0; i < n; ++i) t.parents.push_back(i - 1);
    }
    return {};
}

status plugin_speculator::propose(std::span<const draft_request> requests, std::span<draft_tree> out) {
    TROUPE_ASSERT(out.size() == requests.size(), "one proposal per request");
    for (draft_tree& t : out) t.clear();
    status st;
    if (!has(offsetof(troupe_spec_ops, propose_batch)) || ops_->propose_batch == nullptr) {
        st = propose_v1(requests, out);
    } else {
        const size_t n = requests.size();
        c_requests_.resize(n);
        c_proposals_.resize(n);
        if (q_scratch_.size() < n) q_scratch_.resize(n);
        for (size_t r = 0; r < n; ++r) {
            const draft_request& q = requests[r];
            draft_tree& t = out[r];
            const auto cap = static_cast<size_t>(std::max(0, q.max_nodes));
            t.tokens.assign(cap, 0);
            t.parents.assign(cap, -1);
            // The plugin writes draft distributions into a buffer kept across steps (grown, never cleared: most
            // plugins leave it unused, and zeroing [max_nodes, n_vocab] floats per sequence per step is not free);
            // only the rows of a proposal that has them are copied into the tree.
            std::vector<float>& q_rows = q_scratch_[r];
            const size_t q_size = n_vocab_ > 0 ? cap * static_cast<size_t>(n_vocab_) : 0;
            if (q_rows.size() < q_size) q_rows.resize(q_size);
            troupe_spec_request& c = c_requests_[r];
            c = troupe_spec_request{};
            c.struct_size = sizeof c;
            c.version = TROUPE_SPEC_REQUEST_VERSION;
            c.seq_id = q.seq_id;
            c.tokens = q.tokens.data();
            c.n_tokens = static_cast<int64_t>(q.tokens.size());
            c.n_new = q.n_new;
            c.max_nodes = q.max_nodes;
            c.max_depth = q.max_depth;
            c.temperature = q.temperature;
            c.block_table = q.block_table.data();
            c.n_blocks = static_cast<int32_t>(q.block_table.size());
            c.block_size = q.block_size;
            troupe_spec_proposal& p = c_proposals_[r];
            p = troupe_spec_proposal{};
            p.struct_size = sizeof p;
            p.version = TROUPE_SPEC_PROPOSAL_VERSION;
            p.tokens = t.tokens.data();
            p.parents = t.parents.data();
            p.q = q_size == 0 ? nullptr : q_rows.data();
            p.n_vocab = n_vocab_;
        }
        const int32_t rc = ops_->propose_batch(instance_->handle(), c_requests_.data(), static_cast<int32_t>(n),
                                               c_proposals_.data(), bridge_ ? bridge_->c() : nullptr);
        if (rc != TROUPE_OK) {
            st = instance_->op_error("propose_batch", rc);
        } else {
            for (size_t r = 0; r < n && st.ok(); ++r) {
                const troupe_spec_proposal& p = c_proposals_[r];
                draft_tree& t = out[r];
                if (p.n_nodes < 0 || p.n_nodes > requests[r].max_nodes) {
                    st = make_error("plugin " + instance_->label() + ": proposal for sequence " +
                                    std::to_string(requests[r].seq_id) + " has " + std::to_string(p.n_nodes) +
                                    " nodes, capacity " + std::to_string(requests[r].max_nodes));
                    break;
                }
                const auto k = static_cast<size_t>(p.n_nodes);
                t.tokens.resize(k);
                t.parents.resize(k);
                if (p.has_q != 0 && p.q != nullptr) {
                    t.q.assign(q_scratch_[r].begin(),
                               q_scratch_[r].begin() + static_cast<std::ptrdiff_t>(k * static_cast<size_t>(n_vocab_)));
                }
            }
        }
    }
    for (size_t r = 0; r < requests.size() && st.ok(); ++r) st = check(requests[r], out[r]);
    if (!st.ok()) {
        for (draft_tree& t : out) t.clear();
    }
    return st;
}

}  // namespace troupe
