#include "core/plugin_host/plugin_attention_op.h"

#include "core/plugin_host/parallel_bridge.h"

namespace troupe {

plugin_attention_op::plugin_attention_op(std::shared_ptr<plugin_instance> instance) : instance_(std::move(instance)) {}

std::string plugin_attention_op::name() const {
    return instance_->label();
}

bool plugin_attention_op::supports(kv_dtype t) const {
    const troupe_attention_ops* ops = instance_->descriptor().attention;
    uint32_t types = TROUPE_HAS_FIELD(ops, troupe_attention_ops, kv_types) ? ops->kv_types : 0;
    if (types == 0) types = TROUPE_KV_TYPE_BIT(TROUPE_KV_F32);  // 0 or absent: float32 only
    return (types & TROUPE_KV_TYPE_BIT(t == kv_dtype::f16 ? TROUPE_KV_F16 : TROUPE_KV_F32)) != 0;
}

bool plugin_attention_op::supports_trees() const {
    const troupe_attention_ops* ops = instance_->descriptor().attention;
    return TROUPE_HAS_FIELD(ops, troupe_attention_ops, trees) && ops->trees == 1;
}

uint32_t plugin_attention_op::features() const {
    const troupe_attention_ops* ops = instance_->descriptor().attention;
    return TROUPE_HAS_FIELD(ops, troupe_attention_ops, features) ? ops->features : 0u;
}

status plugin_attention_op::forward(const attention_call& call, const parallel_for_fn& parallel_for) {
    troupe_attention_call c{};
    c.struct_size = sizeof(troupe_attention_call);
    c.version = TROUPE_ATTENTION_CALL_VERSION;
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
    c.k_pool = call.k_pool;
    c.v_pool = call.v_pool;
    c.kv_type = call.kv_type == kv_dtype::f16 ? TROUPE_KV_F16 : TROUPE_KV_F32;
    if (call.rows != nullptr) {
        // A plugin without trees would read the call as causal by position and attend to the wrong rows.
        if (!supports_trees()) {
            return make_error("plugin " + name() + " does not take tree attention calls (troupe_attention_ops.trees)");
        }
        c.rows = call.rows;
        c.mask_base = call.mask_base;
        c.mask = call.mask;
        c.mask_words = call.mask_words;
    }
    c.layer = call.layer;
    const uint32_t needed = (call.softcap != 0.0f ? attention_softcap : 0u) |
                            (call.window > 0 ? attention_window : 0u) | (call.kv_lora_rank > 0 ? attention_mla : 0u);
    if ((needed & ~features()) != 0) {
        return make_error("plugin " + name() +
                          " does not take this model's attention (soft-capping, sliding window or MLA; "
                          "troupe_attention_ops.features)");
    }
    c.softcap = call.softcap;
    c.window = call.window;
    c.kv_lora_rank = call.kv_lora_rank;
    c.rope_dim = call.rope_dim;
    c.v_head_dim = call.v_head_dim;
    const parallel_bridge bridge(parallel_for);
    const int32_t rc = instance_->descriptor().attention->forward(instance_->handle(), &c, bridge.c());
    if (rc != TROUPE_OK) return instance_->op_error("attention forward", rc);
    return status::success();
}

}  // namespace troupe
