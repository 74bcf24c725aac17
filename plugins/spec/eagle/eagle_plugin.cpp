// spec/eagle: one decoder layer over the target's own features drafts in feature space and proposes a dynamic tree
// (EAGLE, with EAGLE-2's tree from the draft's confidence). The layer and its recurrence: eagle_forward.h; the
// per-sequence cache, catch-up and tree: eagle_drafter.h. Features: the target's LAYER_OUT of its last layer for
// every row, through the taps.
//
// Parameters:
//   layer: PATH (required)   a file written by `troupe distill --kind eagle` for this target
//   max_nodes: 1..256        the most nodes a proposal holds (default 5: CPU figures in eagle_drafter.h)
//   depth: 1..16             the deepest draft (default 5)
//   topk: 1..16              children per expanded node, and nodes expanded per level (default 1)
//   catch_up: 0..            the most context rows one proposal computes, the newest (default 16; 0: all;
//                            eagle_drafter.h)
//   shrink_with_batch: bool  with n sequences drafted together, depth - floor(log2 n) levels and max_nodes in
//                            proportion (default true; eagle_drafter.h)
//   min_confidence: 0..1     nodes less likely than this along their path are neither drafted further nor
//                            proposed (default in eagle_drafter.h)
//   weights: f32 | f16 | q8 | q4  how the layer's matrices (and the target's output matrix, 8 bits under q4) are
//                            kept for drafting (default q8; q4 saves 40% of the layer's memory: packed_matrix.h)
#include <troupe/plugin.h>

#include <memory>
#include <string>
#include <utility>

#include "eagle_drafter.h"
#include "plugins/common/dense_ops.h"
#include "plugins/common/packed_matrix.h"
#include "plugins/common/plugin_support.h"
#include "plugins/common/spec_plugin_support.h"
#include "plugins/common/target_model.h"

namespace {

using namespace troupe::plugin_support;
using namespace troupe::spec_common;

constexpr const char* source = "spec/eagle";

struct eagle_matrices {
    float_matrix fc_w, fc_b, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down, token_embd, output_norm, output;
};

}  // namespace

struct troupe_plugin_instance {
    target_model target;
    std::unique_ptr<side_file> file;
    eagle_matrices m;
    std::unique_ptr<troupe::eagle::eagle_drafter> drafter;
    std::string error;
};

namespace {

// The layer's hparams must be the target's (the file records them for this check).
void check_hparams(const side_file& f, const target_model& t) {
    const auto same = [&](const char* key, int64_t want) {
        const int64_t got = f.integer(key);
        if (got != want) {
            throw plugin_error(f.path() + ": " + key + " is " + std::to_string(got) + ", the target has " +
                               std::to_string(want));
        }
    };
    same("eagle.n_heads", t.n_heads);
    same("eagle.n_kv_heads", t.n_kv_heads);
    same("eagle.ffn_length", t.ffn_dim);
}

eagle_matrices read_matrices(const troupe_model_services& s, const side_file& f, const target_model& t) {
    const int64_t d = t.dim, qw = int64_t{t.n_heads} * t.head_dim, kvw = int64_t{t.n_kv_heads} * t.head_dim,
                  ff = t.ffn_dim, nv = t.n_vocab;
    eagle_matrices m;
    m.fc_w = f.matrix("eagle.fc.weight", {2 * d, d});
    m.fc_b = f.matrix("eagle.fc.bias", {d});
    m.wq = f.matrix("eagle.attn_q.weight", {d, qw});
    m.wk = f.matrix("eagle.attn_k.weight", {d, kvw});
    m.wv = f.matrix("eagle.attn_v.weight", {d, kvw});
    m.wo = f.matrix("eagle.attn_output.weight", {qw, d});
    m.ffn_norm = f.matrix("eagle.ffn_norm.weight", {d});
    m.w_gate = f.matrix("eagle.ffn_gate.weight", {d, ff});
    m.w_up = f.matrix("eagle.ffn_up.weight", {d, ff});
    m.w_down = f.matrix("eagle.ffn_down.weight", {ff, d});
    m.token_embd = float_matrix::read(s, s.model, "the target", "token_embd.weight", {d, nv});
    m.output_norm = float_matrix::read(s, s.model, "the target", "output_norm.weight", {d});
    troupe_tensor probe{};
    probe.struct_size = sizeof probe;
    probe.version = TROUPE_TENSOR_VERSION;
    const bool tied = s.tensor(s.host_ctx, s.model, "output.weight", &probe) != TROUPE_OK;
    m.output = tied ? float_matrix::read(s, s.model, "the target", "token_embd.weight", {d, nv})
                    : float_matrix::read(s, s.model, "the target", "output.weight", {d, nv});
    return m;
}

int32_t eagle_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    return create_instance(out, [&](std::string& error) -> int32_t {
        param_reader reader(params);
        const std::string layer_path = path_param(reader, params, "layer");
        troupe::eagle::drafter_params dp;
        dp.max_nodes = static_cast<int32_t>(reader.integer("max_nodes", 1, 256, dp.max_nodes));
        dp.depth = static_cast<int32_t>(reader.integer("depth", 1, 16, dp.depth));
        dp.topk = static_cast<int32_t>(reader.integer("topk", 1, 16, dp.topk));
        dp.catch_up = static_cast<int32_t>(reader.integer("catch_up", 0, 1 << 20, dp.catch_up));
        dp.shrink_with_batch = reader.boolean("shrink_with_batch", dp.shrink_with_batch);
        dp.min_confidence = static_cast<float>(reader.number("min_confidence", 0.0, 1.0, dp.min_confidence));
        const weight_format format = weight_format_of(reader.choice("weights", {"f32", "f16", "q8", "q4"}, "q8"));
        if (layer_path.empty()) {
            reader.fail("layer", "required: the path of a file written by troupe distill --kind eagle for this model");
        }
        if (!finish_params(
                reader,
                {"layer", "max_nodes", "depth", "topk", "weights", "catch_up", "shrink_with_batch", "min_confidence"},
                error))
            return TROUPE_ERR_INVALID_PARAMS;
        auto inst = std::make_unique<troupe_plugin_instance>();
        try {
            const troupe_model_services& s = model_services(params, source);
            inst->target = target_model::read(s, source);
            inst->file = std::make_unique<side_file>(s, layer_path, "layer");
            inst->file->check_made_for(inst->target, "eagle");
            check_hparams(*inst->file, inst->target);
            inst->m = read_matrices(s, *inst->file, inst->target);
        } catch (const plugin_error& e) {
            error = e.what();
            return TROUPE_ERR_INVALID_PARAMS;
        }
        const troupe::eagle::eagle_shape sh = troupe::eagle::shape_of(inst->target);
        const eagle_matrices& m = inst->m;
        const auto pack = [&](const float_matrix& f) {
            return packed_matrix(f.data(), f.n_rows(), f.n_cols(), format);
        };
        troupe::eagle::eagle_weights w =
            troupe::eagle::layer_weights(m, pack, [](const float_matrix& f) { return f.data(); });
        // The target's output matrix stays 8-bit under q4: its rows give the logits the tree is picked from, and
        // it is a small part of the bytes (grown 110M: 0.4 of 5.3 MiB).
        w.output = packed_matrix(m.output.data(), m.output.n_rows(), m.output.n_cols(),
                                 format == weight_format::q4 ? weight_format::q8 : format);
        w.token_embd = m.token_embd.data();
        w.output_norm = m.output_norm.data();
        inst->drafter = std::make_unique<troupe::eagle::eagle_drafter>(sh, std::move(w), dp);
        host_log::write(TROUPE_LOG_LEVEL_INFO, source,
                        "dim %d, %s weights (%.1f MiB read per draft forward), trees of up to %d nodes, depth %d, "
                        "top-%d, min confidence %g",
                        sh.dim, weight_format_name(format), inst->drafter->weights().n_bytes() / 1048576.0,
                        dp.max_nodes, dp.depth, dp.topk, static_cast<double>(dp.min_confidence));
        *out = inst.release();
        return TROUPE_OK;
    });
}

int32_t eagle_begin(troupe_plugin_instance* inst, int64_t seq_id, const int32_t*, int64_t) {
    inst->drafter->begin(seq_id);
    return TROUPE_OK;
}

void eagle_end(troupe_plugin_instance* inst, int64_t seq_id, int32_t) {
    inst->drafter->end(seq_id);
}

int32_t eagle_accepted(troupe_plugin_instance* inst, int64_t seq_id, const int32_t*, int32_t n, const int32_t* nodes) {
    inst->drafter->accepted(seq_id, nodes, n);
    return TROUPE_OK;
}

int32_t eagle_propose_batch(troupe_plugin_instance* inst, const troupe_spec_request* requests, int32_t n,
                            troupe_spec_proposal* out, const troupe_parallel* parallel) {
    return instance_op(inst, [&]() -> int32_t { return inst->drafter->propose(requests, n, out, parallel); });
}

int32_t eagle_max_nodes(troupe_plugin_instance* inst) {
    return inst->drafter->params().max_nodes;
}

int32_t eagle_observe(troupe_plugin_instance* inst, const troupe_tap_data* d) {
    if (is_last_layer_out(*d, inst->target.n_layers)) inst->drafter->taps().observe(*d);
    return TROUPE_OK;
}

constexpr troupe_spec_ops eagle_ops =
    spec_ops(eagle_begin, eagle_accepted, eagle_end, eagle_propose_batch, eagle_max_nodes);

constexpr troupe_tap_ops eagle_taps = last_layer_taps(eagle_observe);

constexpr troupe_plugin_descriptor eagle_descriptor = spec_descriptor({
    .name = "eagle",
    .version = "1.0.0",
    .description =
        "an EAGLE layer over the target's features drafts in feature space and proposes a dynamic tree (EAGLE-2)",
    .score = cpu_only_score,
    .create = eagle_create,
    .ops = &eagle_ops,
    .taps = &eagle_taps,
});

}  // namespace

TROUPE_SPEC_PLUGIN_ENTRY(eagle_descriptor)
