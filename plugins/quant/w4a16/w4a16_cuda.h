// quant/w4a16 on CUDA (w4a16_cuda.cu, built only where nvcc is found; the plugin then defines TROUPE_PLUGIN_CUDA):
// the weights in device memory and the products on the caller's stream. No CUDA header here: the plugin's .cpp
// files stay plain C++.
//
// Device layout of a weight, made on the host from the stored blocks (Q4_1, W4_G64, W4_G128; w4a16_format.h):
//
//   codes  [n_out][n_in / 32] chunks of 16 bytes: chunk c of a row holds weights 32c .. 32c + 31 of it, weight
//          32c + i (i < 16) in the low nibble of byte i and weight 32c + 16 + i in its high nibble: one 128-bit
//          load gives 32 consecutive weights of one group, whatever the group size (32, 64 or 128)
//   scales [n_out][n_in / g] the groups' (fp16 d, fp16 m) pairs as stored; weight = d * q + m
//
// Products: plugins/common/cuda_quant_matmul.cuh (a warp per row for 1..8 tokens, f16 wmma tiles beyond).
#pragma once

#include <troupe/plugin.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace troupe::w4a16_cuda {

struct device_weight;  // w4a16_cuda.cu

// Uploads a validated weight of group size g (w->n_in a multiple of g, rows at least n_in / g blocks) to the current
// device, repacking its rows on the host's pool (host->parallel_for; inline when null). TROUPE_OK, or a status with
// *error saying what failed.
int32_t prepare(const troupe_weight* w, int g, const troupe_host_services* host, device_weight** out,
                std::string* error);
// Bytes a product reads (codes and scales).
size_t prepared_bytes(const device_weight* w);
// Enqueues y[n_tokens, n_out] = x[n_tokens, n_in] * W^T on `stream` (a cudaStream_t; x and y device memory).
int32_t matmul(const device_weight* w, const float* x, float* y, int64_t n_tokens, void* stream, std::string* error);
void release(device_weight* w);

}  // namespace troupe::w4a16_cuda
