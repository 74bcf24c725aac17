#include "actors/engine/engine_params_from.h"

namespace troupe {

engine_params engine_params_from(const engine_config& config) {
    engine_params p;
    p.max_waiting = std::max(1, config.scheduler.max_waiting);
    p.max_running = config.scheduler.max_running_seqs;
    p.max_batched_tokens = config.scheduler.max_batched_tokens;
    switch (config.scheduler.policy) {
        case schedule_policy::continuous:
            p.policy = batching_policy::continuous;
            break;
        case schedule_policy::static_batch:
            p.policy = batching_policy::static_batch;
            break;
    }
    switch (config.scheduler.preemption) {
        case preemption_policy::recompute:
            p.preemption = preemption_mode::recompute;
            break;
        case preemption_policy::swap:
            p.preemption = preemption_mode::swap;
            break;
    }
    p.prefix_caching = config.kv.prefix_caching;
    p.adaptive_draft = config.scheduler.adaptive_draft;
    p.plan_ahead = config.scheduler.plan_ahead;
    return p;
}

}  // namespace troupe
