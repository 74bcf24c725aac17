// quant/fp8 on CUDA: the device layout (fp8_cuda.h), its upload from the panel form, and the weights policy the
// shared products (plugins/common/cuda_quant_matmul.cuh) read it through.
#include "fp8_cuda.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "fp8_cuda_layout.h"
#include "plugins/common/cuda_quant_matmul.cuh"

namespace troupe::fp8_cuda {

struct device_weight {
    void* memory = nullptr;         // one cudaMalloc: codes, then scales
    const uint4* codes = nullptr;   // [n_out][row_codes / 16] 16-byte chunks
    const float* scales = nullptr;  // [n_out]
    int64_t n_in = 0, n_out = 0, row_codes = 0;
    fp8::format format = fp8::format::e4m3;
    size_t bytes = 0;
};

namespace {

struct weights {
    static constexpr int chunk = 16;
    const uint4* codes;
    const float* scales;
    int64_t n_in, n_out, row_chunks;
    __nv_fp8_interpretation_t format;

    using raw = uint4;
    __device__ raw load(int64_t row, int64_t c) const { return __ldg(codes + row * row_chunks + c); }
    __device__ void decode(const raw& q, float (&w)[chunk]) const {
        const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                // The low byte is the earlier weight, and becomes the low (x) half.
                const __half2_raw raw =
                    __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(words[j] >> (16 * h)), format);
                const float2 f = __half22float2(__half2(raw));
                w[4 * j + 2 * h] = f.x;
                w[4 * j + 2 * h + 1] = f.y;
            }
        }
    }
    __device__ float finish(int64_t row, float acc) const {
        return acc * __ldg(scales + row);
    }
};

std::string cuda_failure(const char* what, cudaError_t e) {
    return std::string(what) + " failed: " + cudaGetErrorString(e);
}

}  // namespace

int32_t upload(const fp8_panels::matrix& m, device_weight** out, std::string* error) {
    *out = nullptr;
    const int64_t n_row_codes = row_codes(m.n_in);
    const size_t code_bytes = static_cast<size_t>(n_row_codes * m.n_out);
    std::vector<uint8_t> codes(code_bytes);  // [n_out][n_row_codes]
    rows_from_panels(m, codes.data());
    auto d = std::make_unique<device_weight>();
    const size_t scale_bytes = static_cast<size_t>(m.n_out) * sizeof(float);
    d->bytes = code_bytes + scale_bytes;
    if (const cudaError_t e = cudaMalloc(&d->memory, d->bytes); e != cudaSuccess) {
        d->memory = nullptr;
        *error = "cannot allocate " + std::to_string(d->bytes >> 20) + " MiB of device memory for a [" +
                 std::to_string(m.n_out) + ", " + std::to_string(m.n_in) + "] fp8 weight: " + cudaGetErrorString(e);
        return TROUPE_ERR_OUT_OF_MEMORY;
    }
    auto* mem = static_cast<uint8_t*>(d->memory);
    cudaError_t e = cudaMemcpy(mem, codes.data(), code_bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(mem + code_bytes, m.scales, scale_bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        *error = cuda_failure("copying the fp8 weight to the device", e);
        release(d.release());
        return TROUPE_ERR_INTERNAL;
    }
    d->codes = reinterpret_cast<const uint4*>(mem);  // code_bytes is a multiple of 32: the scales stay aligned
    d->scales = reinterpret_cast<const float*>(mem + code_bytes);
    d->n_in = m.n_in;
    d->n_out = m.n_out;
    d->row_codes = n_row_codes;
    d->format = m.format;
    *out = d.release();
    return TROUPE_OK;
}

size_t prepared_bytes(const device_weight* w) {
    return w == nullptr ? 0 : w->bytes;
}

int32_t matmul(const device_weight* w, const float* x, float* y, int64_t n_tokens, void* stream, std::string* error) {
    const weights p{w->codes, w->scales,         w->n_in,
                    w->n_out, w->row_codes / 16, w->format == fp8::format::e4m3 ? __NV_E4M3 : __NV_E5M2};
    if (const cudaError_t e = cuda_quant::launch_matmul(p, x, y, n_tokens, static_cast<cudaStream_t>(stream));
        e != cudaSuccess) {
        *error = cuda_failure("launching the fp8 product", e);
        return TROUPE_ERR_INTERNAL;
    }
    return TROUPE_OK;
}

void release(device_weight* w) {
    if (w == nullptr) return;
    if (w->memory != nullptr) cudaFree(w->memory);
    delete w;
}

}  // namespace troupe::fp8_cuda
