// kv_cache_op (core/model/kv_cache_op.h) backed by a KV plugin's op table (kv.h): layout() and forward() through
// the C ABI, failures as "plugin kv/<name>: ... failed: <the plugin's message>".
#pragma once

#include <memory>
#include <string>

#include "core/model/kv_cache_op.h"
#include "core/plugin_host/plugin_instance.h"

namespace troupe {

class plugin_kv_op final : public kv_cache_op {
public:
    // `instance` is a KV plugin's (its kv_ops() has layout and forward: plugin_host checks at load).
    explicit plugin_kv_op(std::shared_ptr<plugin_instance> instance);
    std::string name() const override;  // "kv/int8"
    result<kv_layout> layout(const kv_cache_shape& shape) override;
    status forward(const kv_cache_call& call, const parallel_for_fn& parallel_for) override;

private:
    std::shared_ptr<plugin_instance> instance_;
};

}  // namespace troupe
