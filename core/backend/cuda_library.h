// cuda_library: the CUDA backend shared object (kernels/cuda/, libtroupe_cuda.so), loaded with dlopen
// only when a GPU is asked for, so CPU runs never load cudart or cuBLASLt (DESIGN.md, Backends).
//
// Loading: <dir>/libtroupe_cuda.so, dir = the argument, else $TROUPE_BACKEND_DIR, else the build's
// backends/ folder. The library's entry point returns its op table; a table of another ABI version is
// refused with both versions in the message; a table of this version from revision 1 up is accepted, and
// ops appended after revision 1 are checked before use (check_swap_ops). A loaded library stays loaded for the
// process's lifetime (CUDA runtimes do not unload cleanly), and later loads of the same path return the same object.
#pragma once

#include <memory>
#include <string>

#include "core/result.h"
#include "kernels/cuda/cuda_backend_abi.h"

namespace troupe {

class cuda_library {
public:
    // The folder searched when none is given: $TROUPE_BACKEND_DIR, else the build's backends/ folder.
    static std::string default_dir();
    // Whether the NVIDIA driver (libcuda.so.1) can be loaded: cheap, and loads nothing of CUDA's runtime.
    static status check_driver();
    // The library's path if the file exists, else an error naming the path looked at.
    static result<std::string> locate(const std::string& dir = {});
    // Loads <dir>/libtroupe_cuda.so (dir empty: default_dir()) and checks its ABI.
    static result<std::shared_ptr<const cuda_library>> load(const std::string& dir = {});

    const troupe_cuda_ops& ops() const { return *ops_; }
    // Whether the table has model_read_blocks / model_write_blocks (revision 2), else why not.
    status check_swap_ops() const;
    const std::string& path() const { return path_; }

private:
    cuda_library() = default;
    std::string path_;
    const troupe_cuda_ops* ops_ = nullptr;
};

}  // namespace troupe
