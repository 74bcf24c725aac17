#include "core/backend/cuda_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

namespace troupe {

std::string cuda_library::default_dir() {
    if (const char* env = std::getenv("TROUPE_BACKEND_DIR"); env && *env) return env;
    return TROUPE_DEFAULT_BACKEND_DIR;
}

status cuda_library::check_driver() {
    // RTLD_NOLOAD first: where the driver is already in the process, dlopen costs nothing more.
    void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h) h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        const char* why = dlerror();
        return make_error(std::string("no NVIDIA driver: ") + (why ? why : "libcuda.so.1 not found"));
    }
    return {};
}

result<std::string> cuda_library::locate(const std::string& dir) {
    const std::string path =
        (std::filesystem::path(dir.empty() ? default_dir() : dir) / TROUPE_CUDA_LIBRARY_NAME).string();
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        return make_error(path +
                          " not found (the CUDA backend is built where nvcc is found; TROUPE_BACKEND_DIR "
                          "names the folder that holds it)");
    }
    return path;
}

result<std::shared_ptr<const cuda_library>> cuda_library::load(const std::string& dir) {
    static std::mutex mutex;
    static std::map<std::string, std::shared_ptr<const cuda_library>> loaded;
    auto located = locate(dir);
    if (!located.ok()) return located.err();
    const std::string path = located.value();
    std::lock_guard lock(mutex);
    if (auto it = loaded.find(path); it != loaded.end()) return it->second;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char* why = dlerror();
        return make_error("cannot load " + path + ": " + (why ? why : "unknown dlopen error"));
    }
    auto entry = reinterpret_cast<troupe_cuda_entry_fn>(dlsym(handle, TROUPE_CUDA_ENTRY_NAME));
    if (!entry) return make_error(path + " has no entry point " + TROUPE_CUDA_ENTRY_NAME);
    const troupe_cuda_ops* ops = entry();
    if (!ops || ops->abi_version != TROUPE_CUDA_ABI_VERSION || ops->struct_size < TROUPE_CUDA_OPS_MIN_SIZE) {
        return make_error(path + " speaks CUDA backend ABI " + (ops ? std::to_string(ops->abi_version) : "?") +
                          " (op table of " + (ops ? std::to_string(ops->struct_size) : "?") +
                          " bytes); this troupe speaks ABI " + std::to_string(TROUPE_CUDA_ABI_VERSION) +
                          " (op table of " + std::to_string(TROUPE_CUDA_OPS_MIN_SIZE) + " to " +
                          std::to_string(sizeof(troupe_cuda_ops)) + " bytes): rebuild the backend");
    }
    std::shared_ptr<cuda_library> lib(new cuda_library());
    lib->path_ = path;
    lib->ops_ = ops;
    loaded.emplace(path, lib);
    return std::shared_ptr<const cuda_library>(lib);
}

status cuda_library::check_swap_ops() const {
    if (TROUPE_CUDA_OPS_HAS(ops_, model_read_blocks) && TROUPE_CUDA_OPS_HAS(ops_, model_write_blocks)) return {};
    return make_error(path_ + " (" + (ops_->build_info ? ops_->build_info : "no build info") + ", op table of " +
                      std::to_string(ops_->struct_size) +
                      " bytes) has no model_read_blocks / model_write_blocks: swapping KV blocks to host memory needs "
                      "backend ABI " +
                      std::to_string(TROUPE_CUDA_ABI_VERSION) + " revision 2 or later; rebuild the backend");
}

}  // namespace troupe
