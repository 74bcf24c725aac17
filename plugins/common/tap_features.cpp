#include "plugins/common/tap_features.h"

#include <troupe/plugin.h>

namespace troupe::spec_common {

void tap_features::begin(int64_t seq_id) {
    seqs_[seq_id] = sequence{};
}

void tap_features::end(int64_t seq_id) {
    seqs_.erase(seq_id);
}

void tap_features::observe(const troupe_tap_data& d) {
    if (d.width != dim_ || d.data == nullptr || d.seq_ids == nullptr || d.positions == nullptr) return;
    const bool has_nodes = TROUPE_HAS_FIELD(&d, troupe_tap_data, nodes) && d.nodes != nullptr;
    for (int64_t r = 0; r < d.n_rows; ++r) {
        auto it = seqs_.find(d.seq_ids[r]);
        if (it == seqs_.end()) continue;
        const float* h = d.data + r * dim_;
        const int32_t node = has_nodes ? d.nodes[r] : -1;
        if (node < 0) {
            it->second.by_position[d.positions[r]].assign(h, h + dim_);
        } else {
            node_row& row = it->second.by_node[node];
            row.position = d.positions[r];
            row.h.assign(h, h + dim_);
        }
    }
}

void tap_features::accepted(int64_t seq_id, const int32_t* nodes, int32_t n) {
    auto it = seqs_.find(seq_id);
    if (it == seqs_.end()) return;
    sequence& s = it->second;
    for (int32_t i = 0; i < n; ++i) {
        if (nodes[i] < 0) continue;
        auto row = s.by_node.find(nodes[i]);
        if (row != s.by_node.end()) s.by_position[row->second.position] = std::move(row->second.h);
    }
    s.by_node.clear();
}

const float* tap_features::at(int64_t seq_id, int32_t position) const {
    auto it = seqs_.find(seq_id);
    if (it == seqs_.end()) return nullptr;
    auto f = it->second.by_position.find(position);
    return f == it->second.by_position.end() ? nullptr : f->second.data();
}

int32_t tap_features::latest(int64_t seq_id) const {
    auto it = seqs_.find(seq_id);
    if (it == seqs_.end() || it->second.by_position.empty()) return -1;
    return it->second.by_position.rbegin()->first;
}

void tap_features::drop_below(int64_t seq_id, int32_t position) {
    auto it = seqs_.find(seq_id);
    if (it == seqs_.end()) return;
    auto& m = it->second.by_position;
    m.erase(m.begin(), m.lower_bound(position));
}

}  // namespace troupe::spec_common
