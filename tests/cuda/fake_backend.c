/* A stand-in for libtroupe_cuda.so that only answers the loader (tests/cuda/cuda_swap_test.cpp): its op
 * table is FAKE_OPS_SIZE bytes long (a revision-1 table, or a shorter one), with no ops at all. Built
 * twice, into two folders, so the host's handling of older backends is tested without a GPU or nvcc. */
#include "kernels/cuda/cuda_backend_abi.h"

__attribute__((visibility("default"))) const troupe_cuda_ops* troupe_cuda_backend(void) {
    static troupe_cuda_ops ops;
    ops.struct_size = (uint32_t)(FAKE_OPS_SIZE);
    ops.abi_version = TROUPE_CUDA_ABI_VERSION;
    ops.build_info = "fake troupe_cuda abi 1 revision 1";
    return &ops;
}
