#include "core/plugin_host/plugin_instance.h"

namespace troupe {

std::string plugin_status_name(int32_t code) {
    switch (code) {
        case TROUPE_OK:
            return "ok";
        case TROUPE_ERR_INVALID_PARAMS:
            return "invalid params";
        case TROUPE_ERR_INVALID_ARGUMENT:
            return "invalid argument";
        case TROUPE_ERR_UNSUPPORTED:
            return "unsupported";
        case TROUPE_ERR_OUT_OF_MEMORY:
            return "out of memory";
        case TROUPE_ERR_INTERNAL:
            return "internal error";
        default:
            return "status " + std::to_string(code);  // an int from outside the host
    }
}

result<std::shared_ptr<plugin_instance>> plugin_instance::create(std::shared_ptr<plugin_library> library,
                                                                 const flat_params& params, plugin_backend backend,
                                                                 std::shared_ptr<const troupe_model_services> model) {
    const troupe_plugin_descriptor& d = library->descriptor();
    const troupe_plugin_params c_params = params.view(to_c_backend(backend), model.get());
    troupe_plugin_instance* handle = nullptr;
    const int32_t rc = d.create(&c_params, &handle);
    if (rc != TROUPE_OK || handle == nullptr) {
        const char* msg = d.error_message(nullptr);
        std::string why = msg != nullptr && msg[0] != '\0' ? msg : "create failed (" + plugin_status_name(rc) + ")";
        if (rc == TROUPE_OK) why = "create returned no instance";
        if (handle != nullptr) d.destroy(handle);
        return make_error("plugin " + library->label() + ": " + why);
    }
    return std::shared_ptr<plugin_instance>(new plugin_instance(std::move(library), handle, backend, std::move(model)));
}

plugin_instance::plugin_instance(std::shared_ptr<plugin_library> library, troupe_plugin_instance* handle,
                                 plugin_backend backend, std::shared_ptr<const troupe_model_services> model)
    : library_(std::move(library)), model_(std::move(model)), handle_(handle), backend_(backend) {}

plugin_instance::~plugin_instance() {
    library_->descriptor().destroy(handle_);
}

error plugin_instance::op_error(const char* what, int32_t code) const {
    const char* msg = descriptor().error_message(handle_);
    std::string why = msg != nullptr && msg[0] != '\0' ? msg : plugin_status_name(code);
    return make_error("plugin " + label() + ": " + what + " failed: " + why);
}

}  // namespace troupe
