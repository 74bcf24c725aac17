// tap_features: the target's last-layer hidden states (LAYER_OUT of layer n_layers - 1, taps.h) of each sequence's
// positions, collected from the taps and settled by what verification accepted (spec.h's lifecycle).
//
// In a step the target runs a sequence's own tokens (rows with node -1, at their positions) and, when it verifies a
// proposal, one row per proposal node (node i, at the RoPE position context length + depth). Own rows are features
// of the sequence at once; a node's row becomes one only when accepted() names the node among the accepted tokens.
//
//   step:      own row t_{n-1} ─ node 0 ─ node 2          accepted(tokens = {x0, x2, y}, nodes = {0, 2, -1})
//   features:  h_{n-1} (own)   h_n (node 0), h_{n+1} (node 2) kept; the other nodes' rows dropped
//
// Features are kept by position until the plugin takes them (take / latest), so a plugin that catches up over
// several rows (EAGLE) and one that needs the last only (Medusa) share this.
#pragma once

#include <troupe/taps.h>

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

namespace troupe::spec_common {

class tap_features {
public:
    explicit tap_features(int32_t dim) : dim_(dim) {}

    int32_t dim() const { return dim_; }
    void begin(int64_t seq_id);  // starts (or restarts) a sequence with no features
    void end(int64_t seq_id);
    bool tracks(int64_t seq_id) const { return seqs_.count(seq_id) != 0; }

    // One LAYER_OUT observation of the last layer (the caller filters tap and layer); rows of untracked sequences
    // are ignored.
    void observe(const troupe_tap_data& d);
    // The step's accepted nodes (nodes[0..n), -1 for the target's own token) become features; other node rows go.
    void accepted(int64_t seq_id, const int32_t* nodes, int32_t n);

    // The feature at `position`, or null.
    const float* at(int64_t seq_id, int32_t position) const;
    // The highest position with a feature, or -1.
    int32_t latest(int64_t seq_id) const;
    // Drops the features of positions below `position`.
    void drop_below(int64_t seq_id, int32_t position);

private:
    struct node_row {
        int32_t position;
        std::vector<float> h;  // [dim]
    };
    struct sequence {
        std::map<int32_t, std::vector<float>> by_position;  // position -> h [dim]
        std::unordered_map<int32_t, node_row> by_node;      // this step's proposal rows, until accepted()
    };
    int32_t dim_;
    std::unordered_map<int64_t, sequence> seqs_;
};

}  // namespace troupe::spec_common
