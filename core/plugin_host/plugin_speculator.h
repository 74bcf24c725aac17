// plugin_speculator: a spec plugin (plugins/include/troupe/spec.h) as the core's speculator.
//
// A version-2 plugin is called as it is (lifecycle, propose_batch with tree proposals and draft distributions,
// max_nodes). A version-1 plugin (propose only) proposes a chain per sequence, at most max_draft_v1 tokens.
// Proposals are checked here (tokens within the vocabulary, parents earlier nodes, at most max_nodes): a plugin
// that breaks the contract fails the step's proposals with a message that says how, never the requests.
#pragma once

#include <memory>
#include <vector>

#include "core/plugin_host/parallel_bridge.h"
#include "core/plugin_host/plugin_instance.h"
#include "core/plugin_host/speculator.h"

namespace troupe {

class plugin_speculator final : public speculator {
public:
    // Draft tokens asked of a version-1 plugin per step (its own params.max_draft caps what it proposes).
    static constexpr int32_t max_draft_v1 = 16;

    explicit plugin_speculator(std::shared_ptr<plugin_instance> instance);

    // The target's vocabulary: proposals are checked against it, and draft distributions ([max_nodes, n_vocab]
    // rows) are offered to the plugin once it is known (0: deterministic drafts only).
    void set_n_vocab(int32_t n_vocab) { n_vocab_ = n_vocab; }
    // propose_batch runs on the executor's workers (the target's pool, idle while the plugin drafts); unset: the
    // plugin gets no parallel_for and runs single-threaded.
    void use_pool(cpu::thread_pool& pool);

    std::string name() const override;
    int32_t max_nodes() const override { return max_nodes_; }
    status begin(int64_t seq_id, std::span<const int32_t> prompt) override;
    status propose(std::span<const draft_request> requests, std::span<draft_tree> out) override;
    status accepted(int64_t seq_id, std::span<const int32_t> tokens, std::span<const int32_t> nodes) override;
    void end(int64_t seq_id, sequence_end why) override;

private:
    bool has(size_t offset) const;  // whether the plugin's spec ops table has the field at `offset`
    status propose_v1(std::span<const draft_request> requests, std::span<draft_tree> out);
    status check(const draft_request& request, const draft_tree& tree) const;

    std::shared_ptr<plugin_instance> instance_;
    const troupe_spec_ops* ops_;
    int32_t max_nodes_ = max_draft_v1;
    int32_t n_vocab_ = 0;
    parallel_for_fn parallel_for_;             // over the pool of use_pool()
    std::unique_ptr<parallel_bridge> bridge_;  // its troupe_parallel
    std::vector<troupe_spec_request> c_requests_;
    std::vector<troupe_spec_proposal> c_proposals_;
    std::vector<std::vector<float>> q_scratch_;  // [n_requests][max_nodes, n_vocab] the plugins' q rows
};

}  // namespace troupe
