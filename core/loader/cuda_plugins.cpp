#include "core/loader/cuda_plugins.h"

#include <algorithm>
#include <set>

#include "core/backend/cuda_upload.h"
#include "core/log/log.h"
#include "core/plugin_host/plugin_model_services.h"

namespace troupe {
namespace {

std::string type_label(ggml_type type) {
    const auto traits = type_traits(static_cast<uint32_t>(type));
    return traits ? std::string(traits->name) : "type " + std::to_string(static_cast<uint32_t>(type));
}

}  // namespace

std::vector<cuda_plugin_need> cuda_plugin_needs(const engine_config& config, const gguf::gguf_file& model,
                                                const std::vector<std::shared_ptr<quant_op>>& quant_ops) {
    std::vector<cuda_plugin_need> needs;
    if (config.kv.plugin.enabled()) {
        const plugin_config& kv = config.kv.plugin;
        needs.push_back({plugin_spec{plugin_kind::kv, kv.name, kv.path, kv.params},
                         "kv.plugin: its KV cache layout is its own (no built-in CUDA kernel reads it)"});
    }
    // Weight types the backend does not take itself, in the order the file first uses them.
    std::vector<ggml_type> foreign;
    std::set<ggml_type> seen;
    for (const gguf::tensor_info& t : model.tensors()) {
        if (seen.insert(t.type).second && !cuda_takes_weight_type(t.type)) foreign.push_back(t.type);
    }
    const std::vector<plugin_config> quant = config.plugins.quant_plugins();
    std::set<ggml_type> taken;  // each type goes to the first plugin that claims it, as on the CPU
    for (size_t i = 0; i < quant.size() && i < quant_ops.size(); ++i) {
        if (quant_ops[i] == nullptr) continue;
        for (ggml_type type : foreign) {
            if (taken.count(type) != 0 || !quant_ops[i]->claims(type)) continue;
            taken.insert(type);
            const plugin_config& q = quant[i];
            needs.push_back({plugin_spec{plugin_kind::quant, q.name, q.path, q.params},
                             "plugins.quant: it claims the model's " + type_label(type) +
                                 " weights, which the CUDA backend does not take itself"});
            break;  // one reason per plugin is enough
        }
    }
    return needs;
}

result<std::vector<loaded_plugin>> load_cuda_plugins(plugin_host& host, const std::vector<cuda_plugin_need>& needs) {
    std::vector<loaded_plugin> loaded;
    for (const cuda_plugin_need& need : needs) {
        auto p = host.load(need.spec);
        if (!p.ok()) return make_error(p.message() + " (needed on the GPU: " + need.why + ")");
        loaded.push_back(std::move(*p));
    }
    return loaded;
}

status check_cuda_plugins(const engine_config& config, std::shared_ptr<const gguf::gguf_file> model) {
    auto services = make_model_services(model);
    std::vector<std::shared_ptr<quant_op>> quant_ops;
    const bool foreign_weights =
        std::any_of(model->tensors().begin(), model->tensors().end(),
                    [](const gguf::tensor_info& t) { return !cuda_takes_weight_type(t.type); });
    if (foreign_weights) {
        plugin_host cpu(plugin_host_options{config.plugins.plugin_dir, plugin_backend::cpu}, services);
        for (const plugin_config& q : config.plugins.quant_plugins()) {
            auto p = cpu.load(plugin_spec{plugin_kind::quant, q.name, q.path, q.params});
            if (!p.ok()) return p.err();
            quant_ops.push_back(p->quant);
        }
    }
    const std::vector<cuda_plugin_need> needs = cuda_plugin_needs(config, *model, quant_ops);
    if (needs.empty()) {
        TROUPE_LOG_INFO("loader",
                        "cuda: attention and weights run on the CUDA backend's built-in kernels "
                        "(plugins.attention and plugins.quant apply to the CPU)");
        return status::success();
    }
    plugin_host gpu(plugin_host_options{config.plugins.plugin_dir, plugin_backend::cuda}, services);
    auto loaded = load_cuda_plugins(gpu, needs);
    if (!loaded.ok()) return loaded.err();
    for (size_t i = 0; i < loaded->size(); ++i) {
        const loaded_plugin& p = (*loaded)[i];
        if (p.info.kind != plugin_kind::kv) continue;  // quant plugins: the CUDA graph calls their products
        return make_error("plugin kv/" + p.info.name + ": runs on cuda (score " +
                          std::to_string(p.instance->library().score(plugin_backend::cuda)) +
                          "), but the CUDA graph does not call KV plugin ops yet (needed on the GPU: " + needs[i].why +
                          "); run it with --device cpu");
    }
    return status::success();
}

result<std::vector<std::shared_ptr<quant_op>>> load_cuda_quant_ops(const engine_config& config,
                                                                   std::shared_ptr<const gguf::gguf_file> model) {
    plugin_host gpu(plugin_host_options{config.plugins.plugin_dir, plugin_backend::cuda}, make_model_services(model));
    std::vector<std::shared_ptr<quant_op>> ops;
    for (const plugin_config& q : config.plugins.quant_plugins()) {
        auto p = gpu.load(plugin_spec{plugin_kind::quant, q.name, q.path, q.params});
        if (!p.ok()) {
            TROUPE_LOG_DEBUG("loader", "cuda: quant/%s stays on the CPU side: %s", q.name.c_str(), p.message().c_str());
            continue;
        }
        if (p->quant) ops.push_back(p->quant);
    }
    return ops;
}

}  // namespace troupe
