// fn_speculator: a speculator from a function that proposes a chain for a context, for tests of the executor and
// the engine that need drafts of a known shape (right, wrong, sometimes right) without a plugin.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/plugin_host/speculator.h"

namespace troupe::testing {

using chain_fn =
    std::function<std::vector<int32_t>(int64_t seq_id, std::span<const int32_t> context, int32_t max_draft)>;

class fn_speculator final : public speculator {
public:
    explicit fn_speculator(chain_fn fn, int32_t max_nodes = 16) : fn_(std::move(fn)), max_nodes_(max_nodes) {}
    std::string name() const override { return "test/fn"; }
    int32_t max_nodes() const override { return max_nodes_; }
    status begin(int64_t, std::span<const int32_t>) override { return {}; }
    status propose(std::span<const draft_request> requests, std::span<draft_tree> out) override {
        for (size_t i = 0; i < requests.size(); ++i) {
            out[i].clear();
            out[i].tokens = fn_(requests[i].seq_id, requests[i].tokens, requests[i].max_nodes);
            if (static_cast<int32_t>(out[i].tokens.size()) > requests[i].max_nodes)
                out[i].tokens.resize(static_cast<size_t>(requests[i].max_nodes));
            for (size_t j = 0; j < out[i].tokens.size(); ++j) out[i].parents.push_back(static_cast<int32_t>(j) - 1);
        }
        return {};
    }
    status accepted(int64_t, std::span<const int32_t>, std::span<const int32_t>) override { return {}; }
    void end(int64_t, sequence_end) override {}

private:
    chain_fn fn_;
    int32_t max_nodes_;
};

inline std::shared_ptr<speculator> speculator_from(chain_fn fn, int32_t max_nodes = 16) {
    if (!fn) return nullptr;
    return std::make_shared<fn_speculator>(std::move(fn), max_nodes);
}

}  // namespace troupe::testing
