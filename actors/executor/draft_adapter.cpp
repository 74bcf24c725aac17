#include "actors/executor/draft_adapter.h"

#include "core/log/log.h"
#include "core/plugin_host/draft_proposer.h"

namespace troupe {

draft_proposer_fn draft_fn_from(std::shared_ptr<draft_proposer> proposer) {
    if (!proposer) return {};
    auto n_failures = std::make_shared<int64_t>(0);
    return [proposer, n_failures](int64_t seq_id, std::span<const int32_t> context, int32_t max_draft) {
        auto drafts = proposer->propose(context, max_draft);
        if (drafts.ok()) return std::move(drafts).value();
        // The first failures in full, then one line per thousand.
        if ((*n_failures)++ < 10 || *n_failures % 1000 == 0) {
            TROUPE_LOG_WARN("executor", "draft proposer %s failed for sequence %lld (%lld failures so far): %s",
                            proposer->name().c_str(), static_cast<long long>(seq_id),
                            static_cast<long long>(*n_failures), drafts.message().c_str());
        }
        return std::vector<int32_t>{};
    };
}

}  // namespace troupe
