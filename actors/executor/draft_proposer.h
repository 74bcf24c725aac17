// The executor's seam for speculative decoding: something that proposes up to max_draft tokens to
// follow a sequence's context. The plugin host adapts spec plugins (plugins/include/troupe/plugin.h,
// troupe_spec_ops::propose) to this; tests pass lambdas. Called on the executor's lane only.
// Proposals are only proposals: the executor verifies every one against the model.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace troupe {

using draft_proposer_fn =
    std::function<std::vector<int32_t>(int64_t seq_id, std::span<const int32_t> context, int32_t max_draft)>;

}  // namespace troupe
