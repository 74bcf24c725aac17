// model_loader: from an engine_config to a runnable model — the GGUF file, its tokenizer, the plugins
// the config names (attention, quant, spec) and a model_runner on the configured device. This is
// where `troupe run`, `troupe bench` and the golden tests meet the same start-up path.
//
// device: cuda loads the CUDA backend only when asked; where it cannot start (no GPU, no driver,
// not built) the model runs on the CPU and one log line says why.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/config/engine_config.h"
#include "core/gguf/gguf_file.h"
#include "core/model/model_runner.h"
#include "core/plugin_host/speculator.h"
#include "core/result.h"
#include "core/tokenizer/tokenizer.h"

namespace troupe {

class cpu_llama;

struct loaded_model {
    std::shared_ptr<const gguf::gguf_file> file;
    std::shared_ptr<const tokenizer> tok;
    std::unique_ptr<model_runner> runner;
    std::shared_ptr<speculator> spec;       // null when plugins.spec is none
    std::vector<std::string> plugins;       // "attention/gqa", "quant/q8", ...
    device_kind device = device_kind::cpu;  // where it actually runs
    cpu_llama* cpu = nullptr;               // the runner, when it runs on the CPU (benchmarks read its figures)
    std::string kv_summary;                 // the KV cache's layout and pool, as logged at load
    std::string spec_error;                 // with load_options::spec_optional: why plugins.spec does not run
};

// The model path the config names, or ../shared/models/stories260K.gguf beside the source tree when
// none is named and it exists; otherwise an error that says how to name one.
result<std::string> resolve_model_path(const engine_config& config);

struct load_options {
    // A spec plugin that cannot run (refused, a bad drafter or heads file, a tree the KV budget cannot hold) is
    // logged and left out instead of failing the load: what a server wants, since speculation only changes speed.
    bool spec_optional = false;
    // The caller drives the runner through the engine's KV allocator, which gives a block table per KV group: a model
    // with sliding-window layers then gets kv.window_release (kv_groups.h). Callers that lay out block tables
    // themselves (greedy_generate, bench, perplexity) give one table for every layer, as without windows.
    bool kv_groups = false;
};

result<loaded_model> load_model(const engine_config& config, const load_options& options = {});

}  // namespace troupe
