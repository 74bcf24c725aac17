#include "core/loader/model_loader.h"

#include <unistd.h>
#include <algorithm>

#include <filesystem>

#include "core/backend/cuda_runner.h"
#include "core/backend/llama_view_of.h"
#include "core/loader/cuda_plugins.h"
#include "core/log/log.h"
#include "core/model/cpu_llama.h"
#include "core/model/draft_layout.h"
#include "core/model/kv_groups.h"
#include "core/model/kv_layout.h"
#include "core/model/quant_chain.h"
#include "core/model/tap_fanout.h"
#include "core/plugin_host/plugin_host.h"
#include "core/plugin_host/plugin_kv_op.h"
#include "core/plugin_host/plugin_model_runners.h"
#include "core/plugin_host/plugin_model_services.h"
#include "core/plugin_host/plugin_tap_sink.h"

namespace troupe {
namespace {

// The layout the KV pool is sized with: the target's, plus `second_bytes` per token (all layers of the second models)
// spread over the target's `n_layers`, rounded up.
kv_layout with_second_models(kv_layout layout, size_t second_bytes, int32_t n_layers) {
    if (second_bytes == 0) return layout;
    layout.bytes_per_token += (second_bytes + static_cast<size_t>(n_layers) - 1) / static_cast<size_t>(n_layers);
    layout.name += " + drafter";
    return layout;
}

result<loaded_plugin> load_plugin(plugin_host& host, plugin_kind kind, const plugin_config& pc) {
    plugin_spec spec{kind, pc.name, pc.path, pc.params};
    return host.load(spec);
}

// A spec plugin's trees take KV rows beyond each running sequence's context (its draft room) and one verification
// pass: refuse, at load, trees the runner cannot verify in one step or the KV budget cannot hold for every running
// sequence beside its context.
status check_tree_fits(const speculator& spec, int64_t pool_tokens, int32_t max_seqs) {
    const int32_t nodes = spec.max_nodes();
    if (nodes > k_max_tree_nodes) {
        return make_error("plugins.spec: " + spec.name() + " proposes up to " + std::to_string(nodes) +
                          " draft nodes per step, more than the " + std::to_string(k_max_tree_nodes) +
                          " one verification pass takes: make its tree smaller");
    }
    const int64_t per_seq = pool_tokens / std::max(1, max_seqs);
    if (2 * static_cast<int64_t>(nodes) > per_seq) {
        return make_error("plugins.spec: " + spec.name() + " proposes up to " + std::to_string(nodes) +
                          " draft nodes per sequence, but the KV budget holds " + std::to_string(per_seq) +
                          " tokens per running sequence (" + std::to_string(pool_tokens) + " tokens for " +
                          std::to_string(max_seqs) +
                          " sequences): make the tree at most half of that, raise kv.memory, or lower "
                          "scheduler.max_running_seqs");
    }
    return {};
}

}  // namespace

result<std::string> resolve_model_path(const engine_config& config) {
    if (!config.model.empty()) return config.model;
    const auto fallback = std::filesystem::path(TROUPE_SOURCE_DIR) / ".." / "shared" / "models" / "stories260K.gguf";
    if (std::filesystem::exists(fallback)) return std::filesystem::weakly_canonical(fallback).string();
    return make_error(
        "no model named: pass --model FILE.gguf, set `model:` in a --config file, or set TROUPE_MODEL "
        "(any Llama-family GGUF file; `troupe synth` writes one with random weights)");
}

result<loaded_model> load_model(const engine_config& config, const load_options& options) {
    auto path = resolve_model_path(config);
    if (!path.ok()) return path.err();
    auto file = gguf::gguf_file::open(*path);
    if (!file.ok()) return file.err();
    loaded_model m;
    m.file = *file;
    auto tok = tokenizer::from_gguf(*m.file);
    if (!tok.ok()) return tok.err();
    m.tok = *tok;
    auto weights = bind_llama_weights(m.file);
    if (!weights.ok()) return weights.err();

    // Plugins see the model's tensors and metadata by name, may open side files and have the host run a second model
    // (tensors.h; a draft model: plugin_model_runners, started below once the KV pool is sized).
    const kv_dtype kv_type = config.kv.dtype == kv_cache_type::f16 ? kv_dtype::f16 : kv_dtype::f32;
    auto second_models = std::make_shared<plugin_model_runners>(m.file, m.tok, weights->hp.n_vocab, kv_type);
    plugin_host host(plugin_host_options{config.plugins.plugin_dir, plugin_backend::cpu},
                     make_model_services(m.file, second_models));
    cpu_llama_params params;
    // Every loaded plugin that observes taps (taps.h) gets them from the graph.
    std::vector<std::shared_ptr<tap_sink>> taps;
    auto observe_taps = [&](const loaded_plugin& p) -> status {
        if (p.instance == nullptr || p.instance->tap_ops() == nullptr) return {};
        auto sink = plugin_tap_sink::create(p.instance);
        if (!sink.ok()) return sink.err();
        if ((*sink)->wanted() != 0) taps.push_back(std::move(*sink));
        return {};
    };
    // A model with multi-head latent attention (deepseek2) needs attention/mla: the default attention (gqa, by name)
    // becomes mla, with mla's default parameters; any other plugin must declare MLA (checked by cpu_llama).
    plugin_config attention_config = config.plugins.attention;
    const bool target_mla = weights->hp.mla.has_value();
    if (target_mla && attention_config.name == "gqa" && attention_config.path.empty()) {
        TROUPE_LOG_INFO("loader", "%s uses multi-head latent attention: plugins.attention gqa -> mla",
                        weights->hp.architecture.c_str());
        attention_config = plugin_config("mla");
    }
    auto attention = load_plugin(host, plugin_kind::attention, attention_config);
    if (!attention.ok()) return attention.err();
    if (status st = observe_taps(*attention); !st.ok()) return st.err();
    params.attention = attention->attention;
    m.plugins.push_back("attention/" + attention_config.name);
    // plugins.quant: one plugin, or a chain in which each weight goes to the first that claims its type.
    std::vector<std::shared_ptr<quant_op>> quant_ops;
    for (const plugin_config& q : config.plugins.quant_plugins()) {
        auto quant = load_plugin(host, plugin_kind::quant, q);
        if (!quant.ok()) return quant.err();
        if (quant->quant == nullptr) {
            return make_error("plugins.quant: plugin quant/" + q.name +
                              " has no runtime matmul; it only quantizes offline (troupe quantize --method " + q.name +
                              ")");
        }
        quant_ops.push_back(quant->quant);
        if (status st = observe_taps(*quant); !st.ok()) return st.err();
        m.plugins.push_back("quant/" + q.name);
    }
    if (quant_ops.size() == 1) params.quant = quant_ops[0];
    if (quant_ops.size() > 1) params.quant = std::make_shared<quant_chain>(std::move(quant_ops));
    // Speculation only changes speed: with options.spec_optional a spec plugin that cannot run is reported
    // (m.spec_error) and the model runs without it.
    size_t n_taps_before_spec = 0;
    std::shared_ptr<plugin_speculator> spec_plugin;  // m.spec's plugin, for its worker pool below
    auto spec_failed = [&](const error& e) -> status {
        if (!options.spec_optional) return e;
        m.spec = nullptr;
        m.spec_error = e.message;
        taps.resize(n_taps_before_spec);
        TROUPE_LOG_ERROR("loader", "%s; running without speculative decoding", e.message.c_str());
        return {};
    };
    if (config.plugins.spec.enabled()) {
        auto spec = load_plugin(host, plugin_kind::spec, config.plugins.spec);
        n_taps_before_spec = taps.size();
        if (!spec.ok()) {
            if (status st = spec_failed(spec.err()); !st.ok()) return st.err();
        } else {
            spec->spec->set_n_vocab(weights->hp.n_vocab);
            m.spec = spec->spec;
            spec_plugin = spec->spec;
            if (status st = observe_taps(*spec); !st.ok()) {
                if (status again = spec_failed(st.err()); !again.ok()) return again.err();
            } else {
                m.plugins.push_back("spec/" + config.plugins.spec.name);
            }
        }
    }

    // KV cache: the attention plugin's built-in pools (kv.dtype), or a KV plugin's own layout (kv.plugin); the pool
    // is sized from the layout alone (size_kv_cache: blocks, window slots, the cap of four times what every running
    // sequence at full context needs).
    const llama_hparams& hp = weights->hp;
    const int32_t block_size = config.kv.block_size;
    params.max_seqs = config.scheduler.max_running_seqs;
    kv_layout layout = hp.mla ? mla_kv_layout(*hp.mla, kv_type) : builtin_kv_layout(hp.kv_width(), kv_type);
    if (config.kv.plugin.enabled()) {
        if (config.device == device_kind::cuda) {
            return make_error("kv.plugin " + config.kv.plugin.name +
                              ": the CUDA backend does not take KV plugins yet (use device: cpu, or kv.plugin: none)");
        }
        auto kv = load_plugin(host, plugin_kind::kv, config.kv.plugin);
        if (!kv.ok()) return kv.err();
        params.kv_cache = std::make_shared<plugin_kv_op>(kv->instance);
        if (status st = observe_taps(*kv); !st.ok()) return st.err();
        auto declared = params.kv_cache->layout({hp.n_layers, hp.n_kv_heads, hp.head_dim, block_size, params.max_seqs});
        if (!declared.ok()) return declared.err();
        layout = *declared;
        params.kv_cache_layout = layout;
        m.plugins.push_back("kv/" + config.kv.plugin.name);
    }
    const uint64_t ram = static_cast<uint64_t>(std::max<long>(1, sysconf(_SC_PHYS_PAGES))) *
                         static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
    // The built-in cache keeps running (with a warning) on less than one full context; a KV plugin, chosen to
    // fit more, is refused.
    // Sliding-window layers (kv.window_release): a block table per group of layers, the windowed groups' blocks
    // released as sequences advance (kv_groups.h). The CPU runner with the built-in cache only: the CUDA runner and KV
    // plugins read one table, and a drafter reads the target's first table for every position.
    std::string no_release;
    if (hp.any_window() && config.kv.window_release && options.kv_groups) {
        if (config.device == device_kind::cuda) no_release = "the CUDA runner reads one block table per sequence";
        if (config.kv.plugin.enabled()) no_release = "kv.plugin " + config.kv.plugin.name + " owns the cache";
        if (m.spec || second_models->size() > 0) no_release = "a drafter reads the target's block tables";
        if (!no_release.empty()) {
            TROUPE_LOG_INFO("loader",
                            "kv.window_release is off for %s's sliding windows: %s; every layer keeps every block",
                            hp.architecture.c_str(), no_release.c_str());
        }
    }
    params.kv_window_release = config.kv.window_release && options.kv_groups && no_release.empty();
    const kv_groups groups = kv_groups::of(hp, params.kv_window_release);
    kv_sizing_inputs sizing_in{hp.n_layers, block_size, hp.n_ctx, params.max_seqs, config.kv.memory.resolve(ram)};
    if (groups.n_groups() > 1 || groups.windows[0] > 0) {
        sizing_in.layers_per_block = groups.n_slots;
        sizing_in.group_windows = groups.windows;
    }
    // A second model's KV pools (a drafter's) are parallel to the target's, block for block: its bytes per token are
    // counted with the target's (spread over the target's layers), so the same budget holds both.
    const kv_layout sizing_layout = with_second_models(layout, second_models->kv_bytes_per_token(), hp.n_layers);
    auto sizing = size_kv_cache(sizing_layout, sizing_in, config.kv.plugin.enabled());
    if (!sizing.ok()) {
        if (config.kv.plugin.enabled())
            return make_error("kv.plugin " + config.kv.plugin.name + ": " + sizing.err().message);
        TROUPE_LOG_WARN("loader", "%s", sizing.err().message.c_str());
        sizing = size_kv_cache(sizing_layout, sizing_in, false);
        if (!sizing.ok()) return sizing.err();
    }
    const int64_t n_blocks = sizing->n_blocks;
    if (m.spec) {
        if (status st = check_tree_fits(*m.spec, n_blocks * block_size, params.max_seqs); !st.ok()) {
            if (status again = spec_failed(st.err()); !again.ok()) return again.err();
            std::erase(m.plugins, "spec/" + config.plugins.spec.name);
        }
    }
    params.kv = kv_geometry{block_size, sizing->n_blocks};
    m.kv_summary = sizing->summary;
    if (second_models->size() > 0) m.kv_summary += ", shared with " + second_models->describe();
    TROUPE_LOG_INFO("loader", "%s", m.kv_summary.c_str());
    params.n_threads = config.threads;
    params.activations = config.kernels.activations == kernel_activations::float32 ? cpu::activation_recipe::float32
                                                                                   : cpu::activation_recipe::quantized;
    params.copy_weights = config.kernels.weights == weight_memory::copy;
    params.kv_type = kv_type;
    if (taps.size() == 1) params.taps = taps[0];
    if (taps.size() > 1) params.taps = std::make_shared<tap_fanout>(std::move(taps));

    auto make_cpu = [&]() -> result<std::unique_ptr<model_runner>> {
        auto runner = cpu_llama::create(std::move(*weights), params);
        if (!runner.ok()) return runner.err();
        m.cpu = runner->get();
        m.device = device_kind::cpu;
        return std::unique_ptr<model_runner>(std::move(*runner));
    };
    result<std::unique_ptr<model_runner>> runner = make_error("no runner");
    if (config.device == device_kind::cuda) {
        cuda_runner_params cp;
        cp.block_size = block_size;
        cp.max_kv_tokens = n_blocks * block_size;
        cp.kv_f16 = kv_type == kv_dtype::f16;
        if (params.taps) cp.taps.push_back(params.taps);  // the CUDA graph reports them too (host copies by default)
        m.device = device_kind::cuda;
        // On the GPU, the plugins it must run there are loaded for cuda (core/loader/cuda_plugins.h), and the quant
        // plugins that run there take their weights into their CUDA kernels.
        runner = make_cuda_runner_or_cpu(llama_view_of(*weights), cp, make_cpu, [&]() -> status {
            if (status s = check_cuda_plugins(config, m.file); !s.ok()) return s;
            auto quant = load_cuda_quant_ops(config, m.file);
            if (!quant.ok()) return quant.err();
            cp.quant = std::move(*quant);
            return status::success();
        });
    } else {
        runner = make_cpu();
    }
    if (!runner.ok()) return runner.err();
    m.runner = std::move(*runner);
    // The spec plugin drafts on the executor's lane between target steps: on the target's workers.
    if (m.spec && spec_plugin && m.cpu != nullptr) spec_plugin->use_pool(m.cpu->pool());
    if (second_models->size() > 0) {
        // On the CPU a second model shares the target's thread pool (the same lane: no two pools spinning on the
        // same cores); on the GPU it runs on the CPU with an own pool.
        cpu_llama_params second = params;
        second.pool = m.cpu != nullptr ? m.cpu->shared_pool() : nullptr;
        // Beside an MLA target's attention/mla a second model attends with gqa (a drafter of its own architecture;
        // an MLA drafter is refused by its runner, naming mla).
        if (target_mla) {
            auto gqa = load_plugin(host, plugin_kind::attention, plugin_config("gqa"));
            if (!gqa.ok()) return gqa.err();
            second.attention = gqa->attention;
        }
        if (status st = second_models->start(second); !st.ok()) return st.err();
    }
    TROUPE_LOG_INFO("loader", "%s", m.runner->description().c_str());
    return m;
}

}  // namespace troupe
