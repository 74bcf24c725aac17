// Matrix products of the backend: y[n_tokens, n_out] (+)= x[n_tokens, n_in] W^T with W packed [n_out, n_in].
//
// Through cuBLASLt with a per-shape plan cached in the context: F32 weights multiply F32 activations with
// F32 compute (CUBLAS_COMPUTE_32F: no TF32, so results match the CPU to rounding); F16/BF16 weights
// multiply the activations rounded to the same type, with F32 accumulation and F32 output. Row-major
// W [n_out, n_in] is column-major [n_in, n_out], so y^T = W x^T is the "TN" product cuBLASLt handles
// best. Where cuBLASLt offers no algorithm for a shape, a simple kernel computes it (same result,
// slower). Lane 0 only (the workspace and the rounded-activation buffer belong to it).
#pragma once

#include <initializer_list>

#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_kernels.h"

namespace troupe::cuda {

// A weight matrix on the device, packed (row stride n_in elements); or, type TROUPE_CUDA_EXTERNAL, a plugin's weight
// whose products its callback makes (data: the model's copy of its troupe_cuda_external_matrix).
struct device_matrix {
    uint32_t type = TROUPE_CUDA_F32;  // F32, F16, BF16 or EXTERNAL
    const void* data = nullptr;
    int64_t n_in = 0;
    int64_t n_out = 0;
};

enum class matmul_impl { cublaslt, simple };

// y may be accumulated into (accumulate: y += x W^T, the residual add for free).
const char* matmul(troupe_cuda_context& ctx, const device_matrix& w, const float* x, float* y, int32_t n_tokens,
                   bool accumulate, matmul_impl impl = matmul_impl::cublaslt);

// Several products of the same x (q, k, v; gate, up), the results those of matmul, not accumulated: in decode one
// launch_gemv_parts for all of them where they are the backend's weights of one type; else x is rounded to the
// weights' 16-bit type once for all of them where they share it (one conversion instead of one per product).
struct matmul_into {
    const device_matrix* w;
    float* y;
};
const char* matmul_group(troupe_cuda_context& ctx, std::initializer_list<matmul_into> products, const float* x,
                         int32_t n_tokens);

// The gated FFN's hidden rows: out = act(x gate^T) * (x up^T), with up_out as scratch ([n_tokens, n_out] each). In
// decode one launch reads both rows of each output (launch_gemv_parts), same bits as the products then the activation.
const char* matmul_glu(troupe_cuda_context& ctx, const device_matrix& gate, const device_matrix& up, const float* x,
                       float* out, float* up_out, int32_t n_tokens, glu_kind glu);

}  // namespace troupe::cuda
