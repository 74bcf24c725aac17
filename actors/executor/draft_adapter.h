// draft_fn_from: adapts the plugin host's draft_proposer (core/plugin_host/draft_proposer.h, what a
// spec plugin becomes) to the executor's seam. A proposer that fails is logged and treated as "no
// draft" for that step: drafts only change speed, never what is emitted, so a broken proposer must
// not fail requests.
#pragma once

#include <memory>

#include "actors/executor/draft_proposer.h"

namespace troupe {

class draft_proposer;

draft_proposer_fn draft_fn_from(std::shared_ptr<draft_proposer> proposer);

}  // namespace troupe
