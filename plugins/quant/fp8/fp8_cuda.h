// quant/fp8 on CUDA (fp8_cuda.cu, built only where nvcc is found; the plugin then defines TROUPE_PLUGIN_CUDA): the
// weights the CPU path quantized (fp8_panels.h: the same codes and scales) moved to device memory, and the products
// on the caller's stream, the codes converted natively (cuda_fp8.h: fp8x2 -> f16x2). No CUDA header here.
//
// Device layout of a weight:
//
//   codes  [n_out][row_codes] one byte per weight, row k-contiguous, rows padded with code 0 (+0.0) to a multiple of
//          32 codes (row_codes): one 128-bit load gives 16 consecutive weights of a row
//   scales [n_out] float32, weight = scale * fp8 value
//
// Products: plugins/common/cuda_quant_matmul.cuh (a warp per row for 1..8 tokens, f16 wmma tiles beyond; the fp8
// values are exact in f16, the scale is applied to the float32 sums).
#pragma once

#include <troupe/plugin.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fp8_panels.h"

namespace troupe::fp8_cuda {

struct device_weight;  // fp8_cuda.cu

// Uploads the panel form m (codes and scales) to the current device; m may be freed afterwards. TROUPE_OK, or a
// status with *error saying what failed.
int32_t upload(const fp8_panels::matrix& m, device_weight** out, std::string* error);
// Bytes a product reads (codes, padding included, and scales).
size_t prepared_bytes(const device_weight* w);
// Enqueues y[n_tokens, n_out] = x[n_tokens, n_in] * W^T on `stream` (a cudaStream_t; x and y device memory).
int32_t matmul(const device_weight* w, const float* x, float* y, int64_t n_tokens, void* stream, std::string* error);
void release(device_weight* w);

}  // namespace troupe::fp8_cuda
