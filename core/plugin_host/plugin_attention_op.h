// attention_op (core/model/ops.h) backed by an attention plugin's op table.
#pragma once

#include <memory>
#include <string>

#include "core/model/ops.h"
#include "core/plugin_host/plugin_instance.h"

namespace troupe {

class plugin_attention_op final : public attention_op {
public:
    explicit plugin_attention_op(std::shared_ptr<plugin_instance> instance);
    std::string name() const override;  // "attention/gqa"
    uint32_t features() const override;
    status forward(const attention_call& call, const parallel_for_fn& parallel_for) override;
    bool supports(kv_dtype t) const override;  // the plugin's ops.kv_types (float32 only without it)
    bool supports_trees() const override;      // the plugin's ops.trees (version 3) is 1

private:
    std::shared_ptr<plugin_instance> instance_;
};

}  // namespace troupe
