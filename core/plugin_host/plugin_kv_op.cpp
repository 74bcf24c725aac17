#include "core/plugin_host/plugin_kv_op.h"

#include "core/plugin_host/parallel_bridge.h"

namespace troupe {

plugin_kv_op::plugin_kv_op(std::shared_ptr<plugin_instance> instance) : instance_(std::move(instance)) {
    TROUPE_ASSERT(instance_ && instance_->kv_ops() && instance_->kv_ops()->layout && instance_->kv_ops()->forward,
                  "plugin_kv_op needs a KV plugin's instance with layout and forward");
}

std::string plugin_kv_op::name() const {
    return instance_->label();
}

result<kv_layout> plugin_kv_op::layout(const kv_cache_shape& shape) {
    troupe_kv_shape s{};
    s.struct_size = sizeof s;
    s.version = TROUPE_KV_SHAPE_VERSION;
    s.n_layers = shape.n_layers;
    s.n_kv_heads = shape.n_kv_heads;
    s.head_dim = shape.head_dim;
    s.block_size = shape.block_size;
    s.max_seqs = shape.max_seqs;
    s.backend = instance_->backend() == plugin_backend::cuda ? TROUPE_BACKEND_CUDA : TROUPE_BACKEND_CPU;
    troupe_kv_layout out{};
    out.struct_size = sizeof out;
    out.version = TROUPE_KV_LAYOUT_VERSION;
    const int32_t rc = instance_->kv_ops()->layout(instance_->handle(), &s, &out);
    if (rc != TROUPE_OK) return instance_->op_error("layout", rc);
    if (out.bytes_per_token == 0 || out.window_tokens < 0 ||
        (out.window_tokens > 0 && out.window_bytes_per_token == 0)) {
        return make_error("plugin " + name() + ": layout declares bytes_per_token " +
                          std::to_string(out.bytes_per_token) + ", window_tokens " + std::to_string(out.window_tokens) +
                          ", window_bytes_per_token " + std::to_string(out.window_bytes_per_token) +
                          "; expected bytes_per_token > 0, window_tokens >= 0 and window bytes with a window");
    }
    kv_layout l;
    l.name = name();
    l.bytes_per_token = out.bytes_per_token;
    l.bytes_per_block = out.bytes_per_block;
    l.window_tokens = out.window_tokens;
    l.window_bytes_per_token = out.window_tokens > 0 ? out.window_bytes_per_token : 0;
    return l;
}

status plugin_kv_op::forward(const kv_cache_call& call, const parallel_for_fn& parallel_for) {
    troupe_kv_call c{};
    c.struct_size = sizeof c;
    c.version = TROUPE_KV_CALL_VERSION;
    c.layer = call.layer;
    c.n_tokens = call.n_tokens;
    c.n_heads = call.n_heads;
    c.n_kv_heads = call.n_kv_heads;
    c.head_dim = call.head_dim;
    c.scale = call.scale;
    c.q = call.q;
    c.k = call.k;
    c.v = call.v;
    c.out = call.out;
    c.positions = call.positions;
    c.seq_of = call.seq_of;
    c.n_seqs = call.n_seqs;
    c.block_tables = call.block_tables;
    c.block_size = call.block_size;
    c.pool = call.pool;
    c.block_bytes = call.block_bytes;
    c.window = call.window;
    c.window_slot = call.window_slot;
    const parallel_bridge bridge(parallel_for);
    const int32_t rc = instance_->kv_ops()->forward(instance_->handle(), &c, bridge.c());
    if (rc != TROUPE_OK) return instance_->op_error("kv forward", rc);
    return status::success();
}

}  // namespace troupe
