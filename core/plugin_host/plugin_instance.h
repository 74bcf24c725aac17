// An instance a plugin made with create(params); destroyed (and its library released) when the last
// shared_ptr to it goes. Adapters and prepared weights hold one.
//
// An instance is used by one thread at a time (the executor's); its error string is per instance.
#pragma once

#include <troupe/plugin.h>

#include <memory>
#include <string>

#include "core/plugin_host/plugin_kind.h"
#include "core/plugin_host/plugin_library.h"
#include "core/plugin_host/plugin_params.h"
#include "core/result.h"

namespace troupe {

class plugin_instance {
public:
    // Calls the plugin's create; a failure becomes "plugin <label>: <the plugin's message>". `model` (tensors by
    // name, tensors.h) is handed to create as troupe_plugin_params.model and kept alive as long as the instance;
    // null when the instance is made without a model.
    static result<std::shared_ptr<plugin_instance>> create(std::shared_ptr<plugin_library> library,
                                                           const flat_params& params, plugin_backend backend,
                                                           std::shared_ptr<const troupe_model_services> model = {});
    ~plugin_instance();
    plugin_instance(const plugin_instance&) = delete;
    plugin_instance& operator=(const plugin_instance&) = delete;

    troupe_plugin_instance* handle() const { return handle_; }
    const troupe_plugin_descriptor& descriptor() const { return library_->descriptor(); }
    const plugin_library& library() const { return *library_; }
    plugin_backend backend() const { return backend_; }
    // The op tables (plugin_library's accessors): null when the plugin has none.
    const troupe_attention_ops* attention_ops() const { return library_->attention_ops(); }
    const troupe_quant_ops* quant_ops() const { return library_->quant_ops(); }
    const troupe_spec_ops* spec_ops() const { return library_->spec_ops(); }
    const troupe_kv_ops* kv_ops() const { return library_->kv_ops(); }
    const troupe_quantize_ops* quantize_ops() const { return library_->quantize_ops(); }
    const troupe_tap_ops* tap_ops() const { return library_->tap_ops(); }
    const std::string& label() const { return library_->label(); }

    // "plugin <label>: <what> failed: <the plugin's last error>" for a failing op call with status `code`.
    error op_error(const char* what, int32_t code) const;

private:
    plugin_instance(std::shared_ptr<plugin_library> library, troupe_plugin_instance* handle, plugin_backend backend,
                    std::shared_ptr<const troupe_model_services> model);

    std::shared_ptr<plugin_library> library_;
    std::shared_ptr<const troupe_model_services> model_;  // outlives handle_ (destroyed after it)
    troupe_plugin_instance* handle_;
    plugin_backend backend_;
};

// Text of a TROUPE_* status code ("invalid params", ...).
std::string plugin_status_name(int32_t code);

}  // namespace troupe
