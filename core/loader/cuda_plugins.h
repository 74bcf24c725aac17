// cuda_plugins: which configured plugins a CUDA run must run on the GPU, loaded there so their score(cuda) decides.
//
// The CUDA backend has built-in kernels that stand in for some plugins:
//   attention  its attention implements troupe_attention_call's contract over its f32 / f16 pool, so
//              plugins.attention applies to the CPU only;
//   quant      it takes F32 / F16 / BF16 weights and dequantizes Q8_0 / Q4_0 / Q4_K / Q6_K itself
//              (cuda_takes_weight_type): a quant plugin is needed on the GPU only for a weight type of the model
//              that it claims and the backend does not take (e.g. W4_G128 for quant/w4a16);
//   kv         a KV plugin owns its cache layout: always needed;
//   spec       drafts are proposed on the host: not a GPU op.
// Each needed plugin is loaded with plugin_backend::cuda: a plugin whose score refuses cuda (every CPU-only plugin)
// is refused with one message naming it and the backend. The CUDA graph calls quant plugins' products (backend ABI
// revision 6): a quant plugin that runs on cuda takes there every matrix type it claims, as on the CPU
// (load_cuda_quant_ops). It calls no KV plugin yet: one that can run on cuda is refused afterwards, saying so.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/config/engine_config.h"
#include "core/gguf/gguf_file.h"
#include "core/model/ops.h"
#include "core/plugin_host/plugin_host.h"

namespace troupe {

struct cuda_plugin_need {
    plugin_spec spec;
    std::string why;  // "its KV cache layout is its own", "claims W4_G128 weights, which the CUDA backend ..."
};

// The plugins of `config` the GPU must run for `model`. quant_ops: the CPU instances of config's quant plugins in
// their order (asked which types they claim); null entries are skipped.
std::vector<cuda_plugin_need> cuda_plugin_needs(const engine_config& config, const gguf::gguf_file& model,
                                                const std::vector<std::shared_ptr<quant_op>>& quant_ops);

// Loads each needed plugin with `host` (made with plugin_backend::cuda); the first refusal is the error, with why
// the plugin was needed.
result<std::vector<loaded_plugin>> load_cuda_plugins(plugin_host& host, const std::vector<cuda_plugin_need>& needs);

// For the loader, once a GPU is known to be there (before the upload): the needs of config and model (config's quant
// plugins are loaded on the CPU to ask what they claim, only where the model has weights the backend does not take),
// each loaded for cuda. Success when none is needed or only quant plugins are; else the first refusal, or, for a KV
// plugin that could run on cuda, an error saying that the CUDA graph does not call KV plugin ops yet.
status check_cuda_plugins(const engine_config& config, std::shared_ptr<const gguf::gguf_file> model);

// The quant ops the CUDA runner hands matrices to (cuda_runner_params::quant): config's quant plugins that load for
// cuda, in their order, each an instance made for cuda whose prepared weights live on the device. A plugin that cannot
// run on cuda is left out (the backend then takes its types itself where it can; check_cuda_plugins refuses the run
// where it cannot).
result<std::vector<std::shared_ptr<quant_op>>> load_cuda_quant_ops(const engine_config& config,
                                                                   std::shared_ptr<const gguf::gguf_file> model);

}  // namespace troupe
