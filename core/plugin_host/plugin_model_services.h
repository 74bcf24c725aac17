// plugin_model_services: troupe_model_services (plugins/include/troupe/tensors.h) over core/gguf's gguf_file,
// handed to plugins as troupe_plugin_params.model: the loaded model's tensors and metadata by name, and side GGUF
// files a plugin opens by path (trained heads, a drafter's extra tensors).
//
//   services ── model ──► troupe_tensor_file { gguf_file of the model }          (lives as long as the services)
//            └─ open_file(path) ──► troupe_tensor_file { gguf_file of the side file }   until close_file
//
// Version 2: a second model the host runs for the plugin (load_model, model_info, model_forward, unload_model) through
// a plugin_model_runners (plugin_model_runners.h), when the loader gives one; without, load_model says the host runs
// none here. The model file's metadata also answers `troupe.fingerprint` (core/gguf/target_fingerprint.h).
//
// Tensor data points into the files' read-only mappings. Side files are opened with gguf_file::open, which checks
// the header and tensor table, so a corrupt file (bad magic, truncated) is one error naming the file; nothing is
// left open. Side files still open when the services go (a plugin that forgot close_file) are closed then.
// Functions may be called from any thread: the model is read-only and the set of open side files is locked.
// Failures set the calling thread's last_error, "<file>: what was wrong".
#pragma once

#include <troupe/plugin.h>

#include <memory>

#include "core/gguf/gguf_file.h"
#include "core/plugin_host/plugin_model_runners.h"

namespace troupe {

// The services for `model`; the returned object (and every tensor pointer it hands out for the model) keeps the
// file mapped. A plugin_instance made with it holds it for its lifetime. `runners`: where load_model's models run
// (null: load_model is refused).
std::shared_ptr<const troupe_model_services> make_model_services(std::shared_ptr<const gguf::gguf_file> model,
                                                                 std::shared_ptr<plugin_model_runners> runners = {});

}  // namespace troupe
