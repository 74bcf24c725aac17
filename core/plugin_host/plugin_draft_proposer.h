// draft_proposer backed by a spec plugin's op table.
#pragma once

#include <memory>
#include <string>

#include "core/plugin_host/draft_proposer.h"
#include "core/plugin_host/plugin_instance.h"

namespace troupe {

class plugin_draft_proposer final : public draft_proposer {
public:
    explicit plugin_draft_proposer(std::shared_ptr<plugin_instance> instance);
    std::string name() const override;  // "spec/ngram"
    result<std::vector<int32_t>> propose(std::span<const int32_t> context, int32_t max_draft) override;

private:
    std::shared_ptr<plugin_instance> instance_;
};

}  // namespace troupe
