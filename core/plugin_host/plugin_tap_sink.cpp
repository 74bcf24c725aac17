#include "core/plugin_host/plugin_tap_sink.h"

namespace troupe {

// The graph's tap ids are the SDK's.
static_assert(static_cast<int32_t>(tap_point::attn_norm) == TROUPE_TAP_ATTN_NORM);
static_assert(static_cast<int32_t>(tap_point::q) == TROUPE_TAP_Q);
static_assert(static_cast<int32_t>(tap_point::k) == TROUPE_TAP_K);
static_assert(static_cast<int32_t>(tap_point::v) == TROUPE_TAP_V);
static_assert(static_cast<int32_t>(tap_point::attn_out) == TROUPE_TAP_ATTN_OUT);
static_assert(static_cast<int32_t>(tap_point::ffn_norm) == TROUPE_TAP_FFN_NORM);
static_assert(static_cast<int32_t>(tap_point::ffn_hidden) == TROUPE_TAP_FFN_HIDDEN);
static_assert(static_cast<int32_t>(tap_point::layer_out) == TROUPE_TAP_LAYER_OUT);
static_assert(static_cast<int32_t>(tap_point::output_norm) == TROUPE_TAP_OUTPUT_NORM);
static_assert(static_cast<int32_t>(tap_point::logits) == TROUPE_TAP_LOGITS);
static_assert(n_tap_points == TROUPE_TAP_COUNT);

result<std::shared_ptr<plugin_tap_sink>> plugin_tap_sink::create(std::shared_ptr<plugin_instance> instance) {
    const troupe_tap_ops* ops = instance->tap_ops();
    if (ops == nullptr) return make_error("plugin " + instance->label() + " observes no taps (no taps op table)");
    const uint64_t wanted = ops->wanted(instance->handle()) & all_taps;
    const bool device = TROUPE_HAS_FIELD(ops, troupe_tap_ops, device_data) && ops->device_data != 0;
    return std::shared_ptr<plugin_tap_sink>(new plugin_tap_sink(std::move(instance), wanted, device));
}

status plugin_tap_sink::observe(const tap_data& d) {
    troupe_tap_data c{};
    c.struct_size = sizeof(troupe_tap_data);
    c.version = TROUPE_TAP_DATA_VERSION;
    c.tap = static_cast<int32_t>(d.tap);
    c.layer = d.layer;
    c.n_rows = d.n_rows;
    c.width = d.width;
    c.data = d.data;
    c.seq_ids = d.seq_ids;
    c.positions = d.positions;
    c.backend = d.stream != nullptr ? TROUPE_BACKEND_CUDA : TROUPE_BACKEND_CPU;
    c.stream = d.stream;
    // Version 2: a step without drafts still says "own token" for every row.
    if (d.nodes != nullptr) {
        c.nodes = d.nodes;
    } else {
        own_nodes_.assign(static_cast<size_t>(d.n_rows), -1);
        c.nodes = own_nodes_.data();
    }
    const int32_t rc = instance_->tap_ops()->observe(instance_->handle(), &c);
    if (rc != TROUPE_OK) return instance_->op_error("observe", rc);
    return {};
}

}  // namespace troupe
