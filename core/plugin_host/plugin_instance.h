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
    // Calls the plugin's create; a failure becomes "plugin <label>: <the plugin's message>".
    static result<std::shared_ptr<plugin_instance>> create(std::shared_ptr<plugin_library> library,
                                                           const flat_params& params, plugin_backend backend);
    ~plugin_instance();
    plugin_instance(const plugin_instance&) = delete;
    plugin_instance& operator=(const plugin_instance&) = delete;

    troupe_plugin_instance* handle() const { return handle_; }
    const troupe_plugin_descriptor& descriptor() const { return library_->descriptor(); }
    const plugin_library& library() const { return *library_; }
    const std::string& label() const { return library_->label(); }

    // "plugin <label>: <what> failed: <the plugin's last error>" for a failing op call with status `code`.
    error op_error(const char* what, int32_t code) const;

private:
    plugin_instance(std::shared_ptr<plugin_library> library, troupe_plugin_instance* handle);

    std::shared_ptr<plugin_library> library_;
    troupe_plugin_instance* handle_;
};

// Text of a TROUPE_* status code ("invalid params", ...).
std::string plugin_status_name(int32_t code);

}  // namespace troupe
