// The backend's host-buffer test entry points shared across its files (cuda_backend.cpp exports them in the op
// table): the buffer helpers every entry point uses, and the attention ones defined in cuda_backend_attention.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_backend_abi.h"
#include "kernels/cuda/cuda_context.h"

namespace troupe::cuda {

// `bytes` of host memory into a new device buffer on `stream`.
inline const char* upload(const void* host, size_t bytes, device_buffer& buf, const char* what, cudaStream_t stream) {
    TROUPE_CUDA_TRY_STATUS(buf.allocate(bytes, what));
    if (bytes) TROUPE_CUDA_TRY(cudaMemcpyAsync(buf.data(), host, bytes, cudaMemcpyHostToDevice, stream));
    return nullptr;
}

inline const char* download(void* host, const device_buffer& buf, size_t bytes, cudaStream_t stream) {
    if (bytes) TROUPE_CUDA_TRY(cudaMemcpyAsync(host, buf.data(), bytes, cudaMemcpyDeviceToHost, stream));
    return nullptr;
}

// Ends an entry point's work on lane 0 and waits for it.
inline const char* finish(troupe_cuda_context& ctx) {
    TROUPE_CUDA_TRY_STATUS(end_lane(ctx, 0));
    TROUPE_CUDA_TRY(cudaStreamSynchronize(ctx.streams[0]));
    return nullptr;
}

// Stores k, v and attends (troupe_cuda_attention_args), and the latent attention's kernels
// (troupe_cuda_mla_attention_args), on host buffers, synchronous on lane 0.
const char* test_attention(troupe_cuda_context* ctx, const troupe_cuda_attention_args* args);
const char* test_mla_attention(troupe_cuda_context* ctx, const troupe_cuda_mla_attention_args* args);

}  // namespace troupe::cuda
