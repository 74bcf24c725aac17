// spec/draft: speculative decoding with a draft model, a second GGUF with the target's vocabulary that the host loads
// and runs (troupe_model_services version 2): its KV rows live in pools parallel to the target's, in the target
// sequences' blocks, counted in the same KV budget. Drafting is in draft_proposer.h.
//
// Parameters:
//   model:     path of the drafter's GGUF file (required; its vocabulary must be the target's)
//   max_draft: 1..16 (default 6)    the longest chain proposed per step
//   adaptive:  true|false (default true)  draft length follows the acceptance (draft_proposer.h); false: always
//              max_draft
//   seed:      0..2^31-1 (default 0)  the drafts' random draws at temperature > 0
//   branch:    1..4 (default 1)  candidates for the first draft (a tree: the chain and branch - 1 sibling roots)
#include <troupe/plugin.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "plugins/common/plugin_support.h"
#include "plugins/common/spec_plugin_support.h"
#include "plugins/spec/draft/draft_proposer.h"

namespace {

using namespace troupe::plugin_support;

constexpr const char* source = "spec/draft";

}  // namespace

struct troupe_plugin_instance {
    const troupe_model_services* services = nullptr;
    troupe_model* model = nullptr;
    std::unique_ptr<spec_draft::draft_proposer> proposer;
    std::string error;

    ~troupe_plugin_instance() {
        if (model != nullptr) services->unload_model(services->host_ctx, model);
    }
};

namespace {

// The drafter's path from params.model: read here (param_reader takes numbers and flags), checked to be a file.
bool read_model_path(const troupe_plugin_params* params, std::string& path, std::string& error) {
    for (size_t i = 0; params != nullptr && i < params->n_items; ++i) {
        const troupe_param& p = params->items[i];
        if (p.key != nullptr && std::string(p.key) == "model") path = p.value != nullptr ? p.value : "";
    }
    if (path.empty()) {
        error =
            "params.model: the drafter's GGUF file is required (plugins: {spec: {name: draft, params: {model: "
            "PATH}}})";
        return false;
    }
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
        error = "params.model: '" + path + "' is not a file (the drafter's GGUF file)";
        return false;
    }
    return true;
}

// The parameters without `model`, for param_reader.
std::vector<troupe_param> other_params(const troupe_plugin_params* params) {
    std::vector<troupe_param> items;
    for (size_t i = 0; params != nullptr && i < params->n_items; ++i) {
        if (params->items[i].key == nullptr || std::string(params->items[i].key) != "model") {
            items.push_back(params->items[i]);
        }
    }
    return items;
}

int32_t draft_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    return create_instance(out, [&](std::string& error) -> int32_t {
        std::vector<troupe_param> items = other_params(params);
        troupe_plugin_params rest{};
        if (params != nullptr) rest = *params;
        rest.items = items.data();
        rest.n_items = items.size();
        param_reader reader(&rest);
        spec_draft::draft_options options;
        options.max_draft = static_cast<int32_t>(reader.integer("max_draft", 1, 16, 6));
        options.adaptive = reader.boolean("adaptive", true);
        options.seed = static_cast<uint64_t>(reader.integer("seed", 0, 2147483647, 0));
        options.branch = static_cast<int32_t>(reader.integer("branch", 1, 4, 1));
        if (!finish_params(reader, {"model", "max_draft", "adaptive", "seed", "branch"}, error))
            return TROUPE_ERR_INVALID_PARAMS;
        std::string path;
        if (!read_model_path(params, path, error)) return TROUPE_ERR_INVALID_PARAMS;
        const troupe_model_services* services =
            params != nullptr && TROUPE_HAS_FIELD(params, troupe_plugin_params, model) ? params->model : nullptr;
        if (services == nullptr || !TROUPE_HAS_FIELD(services, troupe_model_services, unload_model) ||
            services->load_model == nullptr) {
            error = "this host runs no second model (troupe_model_services version 2 is needed for a drafter)";
            return TROUPE_ERR_UNSUPPORTED;
        }
        auto inst = std::make_unique<troupe_plugin_instance>();
        inst->services = services;
        if (services->load_model(services->host_ctx, path.c_str(), &inst->model) != TROUPE_OK) {
            error = std::string("params.model: ") + services->last_error(services->host_ctx);
            return TROUPE_ERR_INVALID_PARAMS;
        }
        troupe_model_info info{};
        info.struct_size = sizeof info;
        if (services->model_info(services->host_ctx, inst->model, &info) != TROUPE_OK) {
            error = std::string("params.model: ") + services->last_error(services->host_ctx);
            return TROUPE_ERR_INTERNAL;
        }
        inst->proposer = std::make_unique<spec_draft::draft_proposer>(services, inst->model, info, options);
        host_log::write(TROUPE_LOG_LEVEL_INFO, source,
                        "drafter %s: %d layers, dim %d, %.1f MiB of weights a token; up to %d drafts%s", path.c_str(),
                        info.n_layers, info.dim, info.weight_bytes_per_token / (1 << 20), options.max_draft,
                        options.adaptive ? ", adaptive" : "");
        *out = inst.release();
        return TROUPE_OK;
    });
}

int32_t draft_score(int32_t backend) {
    return 50;
}

int32_t draft_begin(troupe_plugin_instance* inst, int64_t seq_id, const int32_t* prompt, int64_t n) {
    inst->proposer->begin(seq_id);
    return TROUPE_OK;
}

int32_t draft_accepted(troupe_plugin_instance* inst, int64_t seq_id, const int32_t* tokens, int32_t n,
                       const int32_t* nodes) {
    if (n < 0 || (n > 0 && nodes == nullptr)) {
        inst->error = "accepted got n " + std::to_string(n) + " without nodes";
        return TROUPE_ERR_INVALID_ARGUMENT;
    }
    inst->proposer->accepted(seq_id, nodes, n);
    return TROUPE_OK;
}

void draft_end(troupe_plugin_instance* inst, int64_t seq_id, int32_t reason) {
    inst->proposer->end(seq_id);
    host_log::write(TROUPE_LOG_LEVEL_DEBUG, source, "sequence %lld ended; %s", static_cast<long long>(seq_id),
                    inst->proposer->figures().c_str());
}

int32_t draft_propose_batch(troupe_plugin_instance* inst, const troupe_spec_request* requests, int32_t n,
                            troupe_spec_proposal* out, const troupe_parallel* parallel) {
    return instance_op(inst, [&]() -> int32_t {
        const int32_t rc = inst->proposer->propose(requests, n, out);
        if (rc != TROUPE_OK) inst->error = inst->proposer->error();
        return rc;
    });
}

int32_t draft_max_nodes(troupe_plugin_instance* inst) {
    return inst->proposer->max_nodes();
}

// No version-1 propose: the drafter needs the sequences' blocks.
constexpr troupe_spec_ops draft_ops =
    spec_ops(draft_begin, draft_accepted, draft_end, draft_propose_batch, draft_max_nodes);

constexpr troupe_plugin_descriptor draft_descriptor = spec_descriptor({
    .name = "draft",
    .version = "1.0.0",
    .description =
        "a draft model with the target's vocabulary, run by the host beside the target, proposes a chain per sequence",
    .score = draft_score,
    .create = draft_create,
    .ops = &draft_ops,
    .taps = nullptr,
});

}  // namespace

TROUPE_SPEC_PLUGIN_ENTRY(draft_descriptor)
