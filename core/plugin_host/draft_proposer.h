// draft_proposer: what a speculative-decoding strategy offers the core. It proposes tokens that may
// follow a sequence's context; the core verifies every draft (exact rejection sampling against the
// target model), so a proposer only affects speed, never what is emitted.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"

namespace troupe {

class draft_proposer {
public:
    virtual ~draft_proposer() = default;
    virtual std::string name() const = 0;
    // Up to max_draft tokens to follow `context` (prompt and generated tokens so far); empty when the
    // proposer has nothing to offer. An error is a plugin failure, not "no draft".
    virtual result<std::vector<int32_t>> propose(std::span<const int32_t> context, int32_t max_draft) = 0;
};

}  // namespace troupe
