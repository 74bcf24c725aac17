// spec/medusa: Medusa heads on the target's own last hidden state propose a tree of candidates (spec_design.md,
// "Medusa heads"). Head i maps the feature f of a position to the token i + 2 positions later:
//
//   head_i(f) = output_i · (f + silu(fc_i · f + b_i)),    f = rmsnorm(h^L) · output_norm.weight
//
// h^L is the target's LAYER_OUT of its last layer, observed through the taps for every row of a step. After a step,
// accepted() says which row is the sequence's last verified position (the last accepted node's, else the last own
// token's); its feature predicts the token the target just sampled, so head 0 on it proposes the token after that:
// the tree's roots. Head d-1's top-k gives depth d (medusa_tree.h).
//
//   context ... t_{n-2}  t_{n-1} (the token run this step)    f = feature of t_{n-2}'s position
//   roots: top-k of head 0 (candidates for t_n), their children: top-k of head 1 (for t_{n+1}), ...
//
// Drafts are deterministic (no q rows): the host's rule for them keeps sampled output exactly the target's.
//
// Parameters:
//   heads: PATH (required)   a file written by `troupe distill --kind medusa` for this target
//   topk: [k_1, k_2, ...]    the tree: every combination of the top-k_d tokens of each depth d (default [1, 1, 1],
//                            a chain, cut to the file's heads: on the CPU a node costs a good part of a token to
//                            verify, so small trees win — grown 110M Q8_0, batch 1, heads from `troupe distill`'s
//                            defaults, medians of 3 alternated runs: [1, 1, 1] 1.53x, [1, 1] 1.43x, [2, 1, 1]
//                            1.44x; [4, 2, 2, 1] 0.45x); or
//   choices: [[0], [1], [0, 0], ...]   explicit paths of ranks (Medusa's "medusa choices")
//   max_nodes: 1..256        the proposal's size: the first max_nodes nodes of the tree (default: the whole tree)
//   min_confidence: 0..1     nodes whose path is less likely than this (the product of each head's probability of
//                            its token) are not proposed, nor their subtrees (default 0: every node)
//   weights: f32 | f16 | q8 | q4  how the heads' matrices are kept (default q8; packed_matrix.h)
#include <troupe/plugin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "medusa_tree.h"
#include "plugins/common/dense_ops.h"
#include "plugins/common/packed_matrix.h"
#include "plugins/common/param_lists.h"
#include "plugins/common/plugin_support.h"
#include "plugins/common/spec_plugin_support.h"
#include "plugins/common/tap_features.h"
#include "plugins/common/target_model.h"

namespace {

using namespace troupe::plugin_support;
using namespace troupe::spec_common;
using troupe::medusa::medusa_tree;

constexpr const char* source = "spec/medusa";

struct medusa_head {
    packed_matrix fc_w;   // [dim, dim]
    float_matrix fc_b;    // [dim]
    packed_matrix out_w;  // [n_vocab, dim]
};

struct sequence_state {
    int32_t feature_pos = -1;  // the position whose feature `f` is, -1: none
    std::vector<float> f;      // [dim] rmsnorm(h) · output_norm
};

}  // namespace

struct troupe_plugin_instance {
    target_model target;
    std::unique_ptr<side_file> file;
    std::vector<medusa_head> heads;
    float_matrix output_norm;  // [dim]
    medusa_tree tree;
    tap_features taps{0};
    std::unordered_map<int64_t, sequence_state> seqs;
    float min_score = 0.0f;  // log(min_confidence), -inf for 0
    // Scratch of propose_batch.
    std::vector<float> x, a, r, logits, logp;  // [m, dim] x3, [m, n_vocab], [n_vocab]
    std::string error;
};

namespace {

int32_t medusa_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    return create_instance(out, [&](std::string& error) -> int32_t {
        param_reader reader(params);
        const std::string heads_path = path_param(reader, params, "heads");
        std::vector<int32_t> topk;
        for (int32_t i = 0, n = list_length(params, "topk"); i < n; ++i)
            topk.push_back(static_cast<int32_t>(reader.integer("topk." + std::to_string(i), 1, 64, 1)));
        std::vector<std::vector<int32_t>> choices;
        for (int32_t i = 0, n = list_length(params, "choices"); i < n; ++i) {
            const std::string key = "choices." + std::to_string(i);
            std::vector<int32_t> path;
            for (int32_t j = 0, m = list_length(params, key); j < m; ++j)
                path.push_back(static_cast<int32_t>(reader.integer(key + "." + std::to_string(j), 0, 63, 0)));
            choices.push_back(path);
        }
        const auto max_nodes = static_cast<int32_t>(reader.integer("max_nodes", 1, troupe::medusa::max_tree_nodes, 0));
        const double min_confidence = reader.number("min_confidence", 0.0, 1.0, 0.0);
        const weight_format format = weight_format_of(reader.choice("weights", {"f32", "f16", "q8", "q4"}, "q8"));
        if (heads_path.empty())
            reader.fail("heads",
                        "required: the path of a file written by troupe distill --kind "
                        "medusa for this model");
        if (!topk.empty() && !choices.empty()) reader.fail("choices", "give either topk or choices, not both");
        if (!finish_params(reader, {"heads", "topk", "choices", "max_nodes", "weights", "min_confidence"}, error))
            return TROUPE_ERR_INVALID_PARAMS;
        auto inst = std::make_unique<troupe_plugin_instance>();
        inst->min_score = min_confidence > 0.0 ? static_cast<float>(std::log(min_confidence))
                                               : -std::numeric_limits<float>::infinity();
        try {
            inst->tree = !choices.empty()
                             ? troupe::medusa::tree_from_choices(choices)
                             : troupe::medusa::tree_from_topk(topk.empty() ? std::vector<int32_t>{1, 1, 1} : topk);
        } catch (const std::invalid_argument& e) {
            error = e.what();
            return TROUPE_ERR_INVALID_PARAMS;
        }
        try {
            const troupe_model_services& s = model_services(params, source);
            inst->target = target_model::read(s, source);
            inst->file = std::make_unique<side_file>(s, heads_path, "heads");
            inst->file->check_made_for(inst->target, "medusa");
            const int64_t n_heads = inst->file->integer("medusa.n_heads");
            if (inst->tree.depth > n_heads) {
                if (topk.empty() && choices.empty()) {
                    troupe::medusa::truncate(inst->tree, static_cast<int32_t>(std::count_if(
                                                             inst->tree.nodes.begin(), inst->tree.nodes.end(),
                                                             [&](const auto& n) { return n.depth() <= n_heads; })));
                } else {
                    error = "params." + std::string(choices.empty() ? "topk" : "choices") + ": the tree is " +
                            std::to_string(inst->tree.depth) + " deep, but " + heads_path + " has " +
                            std::to_string(n_heads) + " heads (head i proposes depth i + 1)";
                    return TROUPE_ERR_INVALID_PARAMS;
                }
            }
            if (max_nodes > 0) troupe::medusa::truncate(inst->tree, max_nodes);
            const int64_t dim = inst->target.dim, nv = inst->target.n_vocab;
            for (int32_t i = 0; i < inst->tree.depth; ++i) {
                const std::string p = "medusa." + std::to_string(i) + ".";
                const float_matrix fc = inst->file->matrix(p + "fc.weight", {dim, dim});
                const float_matrix out = inst->file->matrix(p + "output.weight", {dim, nv});
                inst->heads.push_back(medusa_head{packed_matrix(fc.data(), dim, dim, format),
                                                  inst->file->matrix(p + "fc.bias", {dim}),
                                                  packed_matrix(out.data(), nv, dim, format)});
            }
            inst->output_norm = float_matrix::read(s, s.model, "the target", "output_norm.weight", {dim});
        } catch (const plugin_error& e) {
            error = e.what();
            return TROUPE_ERR_INVALID_PARAMS;
        }
        inst->taps = tap_features(inst->target.dim);
        host_log::write(TROUPE_LOG_LEVEL_INFO, source, "%d heads used, a tree of %zu nodes, %d deep, %s weights",
                        static_cast<int>(inst->heads.size()), inst->tree.nodes.size(), inst->tree.depth,
                        weight_format_name(format));
        *out = inst.release();
        return TROUPE_OK;
    });
}

int32_t medusa_begin(troupe_plugin_instance* inst, int64_t seq_id, const int32_t*, int64_t) {
    inst->taps.begin(seq_id);
    inst->seqs[seq_id] = sequence_state{};
    return TROUPE_OK;
}

void medusa_end(troupe_plugin_instance* inst, int64_t seq_id, int32_t) {
    inst->taps.end(seq_id);
    inst->seqs.erase(seq_id);
}

// The sequence's last verified position is the latest feature: keep it normed, drop the rows.
int32_t medusa_accepted(troupe_plugin_instance* inst, int64_t seq_id, const int32_t*, int32_t n, const int32_t* nodes) {
    auto it = inst->seqs.find(seq_id);
    if (it == inst->seqs.end()) return TROUPE_OK;
    inst->taps.accepted(seq_id, nodes, n);
    const int32_t pos = inst->taps.latest(seq_id);
    if (pos < 0) return TROUPE_OK;
    sequence_state& s = it->second;
    s.f.resize(static_cast<size_t>(inst->target.dim));
    rmsnorm(inst->taps.at(seq_id, pos), inst->output_norm.data(), s.f.data(), 1, inst->target.dim,
            inst->target.rms_eps);
    s.feature_pos = pos;
    inst->taps.drop_below(seq_id, pos + 1);
    return TROUPE_OK;
}

int32_t medusa_propose_batch(troupe_plugin_instance* inst, const troupe_spec_request* requests, int32_t n,
                             troupe_spec_proposal* out, const troupe_parallel* parallel) {
    return instance_op(inst, [&]() -> int32_t {
        const int64_t dim = inst->target.dim, nv = inst->target.n_vocab;
        // The requests whose feature is the one before the context's last token.
        std::vector<int32_t> which;
        inst->x.clear();
        for (int32_t i = 0; i < n; ++i) {
            out[i].n_nodes = 0;
            out[i].has_q = 0;
            auto it = inst->seqs.find(requests[i].seq_id);
            if (it == inst->seqs.end() || it->second.feature_pos != requests[i].n_tokens - 2) continue;
            if (requests[i].max_nodes <= 0 || requests[i].max_depth <= 0) continue;
            which.push_back(i);
            inst->x.insert(inst->x.end(), it->second.f.begin(), it->second.f.end());
        }
        if (which.empty()) return TROUPE_OK;
        const auto m = static_cast<int64_t>(which.size());
        // top[d][row]: head d's top k_d tokens for each request.
        std::vector<std::vector<std::vector<std::pair<int32_t, float>>>> top(inst->heads.size());
        const size_t n_heads = inst->heads.size();
        inst->a.resize(n_heads * static_cast<size_t>(m * dim));
        inst->r.resize(static_cast<size_t>(m * dim));
        inst->logits.resize(static_cast<size_t>(m * nv));
        // The heads' first matrices share their input: one product for all of them.
        std::vector<shared_input_product> fcs;
        for (size_t d = 0; d < n_heads; ++d)
            fcs.push_back({&inst->heads[d].fc_w, inst->a.data() + d * static_cast<size_t>(m * dim)});
        if (int32_t rc = matmul_shared_input(parallel, inst->x.data(), m, fcs.data(), fcs.size()); rc != TROUPE_OK)
            return rc;
        const bool screened = inst->min_score > -std::numeric_limits<float>::infinity();
        for (size_t d = 0; d < n_heads; ++d) {
            const medusa_head& h = inst->heads[d];
            const float* a = inst->a.data() + d * static_cast<size_t>(m * dim);
            for (int64_t k = 0; k < m * dim; ++k) inst->r[k] = inst->x[k] + silu(a[k] + h.fc_b.data()[k % dim]);
            const int32_t rc = matmul(parallel, inst->r.data(), m, h.out_w, nullptr, inst->logits.data());
            if (rc != TROUPE_OK) return rc;
            // The top k by log-probability when nodes are screened by it (the same tokens as by logits).
            inst->logp.resize(static_cast<size_t>(nv));
            for (int64_t row = 0; row < m; ++row) {
                const float* x = inst->logits.data() + row * nv;
                if (screened) log_softmax(x, inst->logp.data(), nv);
                top[d].push_back(top_k(screened ? inst->logp.data() : x, nv, inst->tree.k_by_depth[d]));
            }
        }
        for (int64_t row = 0; row < m; ++row) {
            const troupe_spec_request& q = requests[which[row]];
            troupe_spec_proposal& p = out[which[row]];
            // Each tree node's place in the proposal (-1: left out) and its path's log-probability.
            std::vector<int32_t> placed(inst->tree.nodes.size(), -1);
            std::vector<float> score(inst->tree.nodes.size(), 0.0f);
            int32_t k = 0;
            for (size_t i = 0; i < inst->tree.nodes.size(); ++i) {
                const auto& node = inst->tree.nodes[i];
                if (k == q.max_nodes) break;
                if (node.depth() > q.max_depth) break;  // nodes are ordered by depth
                const auto& choices = top[static_cast<size_t>(node.depth() - 1)][static_cast<size_t>(row)];
                const auto rank = static_cast<size_t>(node.ranks.back());
                if (rank >= choices.size()) break;  // a vocabulary smaller than the tree's top-k
                const auto parent = static_cast<size_t>(node.parent);
                if (node.parent >= 0 && placed[parent] < 0) continue;  // its parent was left out
                if (screened) {
                    score[i] = (node.parent >= 0 ? score[parent] : 0.0f) + choices[rank].second;
                    if (score[i] < inst->min_score) continue;
                }
                p.tokens[k] = choices[rank].first;
                p.parents[k] = node.parent >= 0 ? placed[parent] : -1;
                placed[i] = k++;
            }
            p.n_nodes = k;
        }
        return TROUPE_OK;
    });
}

int32_t medusa_max_nodes(troupe_plugin_instance* inst) {
    return static_cast<int32_t>(inst->tree.nodes.size());
}

int32_t medusa_observe(troupe_plugin_instance* inst, const troupe_tap_data* d) {
    if (is_last_layer_out(*d, inst->target.n_layers)) inst->taps.observe(*d);
    return TROUPE_OK;
}

constexpr troupe_spec_ops medusa_ops =
    spec_ops(medusa_begin, medusa_accepted, medusa_end, medusa_propose_batch, medusa_max_nodes);

constexpr troupe_tap_ops medusa_taps = last_layer_taps(medusa_observe);

constexpr troupe_plugin_descriptor medusa_descriptor = spec_descriptor({
    .name = "medusa",
    .version = "1.0.0",
    .description = "Medusa heads on the target's last hidden state propose a tree of each head's top-k tokens",
    .score = cpu_only_score,
    .create = medusa_create,
    .ops = &medusa_ops,
    .taps = &medusa_taps,
});

}  // namespace

TROUPE_SPEC_PLUGIN_ENTRY(medusa_descriptor)
