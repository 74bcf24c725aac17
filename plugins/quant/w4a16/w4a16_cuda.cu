// quant/w4a16 on CUDA: the device layout (w4a16_cuda.h), its upload from the stored blocks, and the weights policy
// the shared products (plugins/common/cuda_quant_matmul.cuh) read it through.
#include "w4a16_cuda.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <vector>

#include "plugins/common/cuda_quant_matmul.cuh"
#include "w4a16_cuda_layout.h"

namespace troupe::w4a16_cuda {

struct device_weight {
    void* memory = nullptr;           // one cudaMalloc: codes, then scales
    const uint4* codes = nullptr;     // [n_out][n_in / 32] 16-byte chunks
    const __half2* scales = nullptr;  // [n_out][n_in / g] (d, m)
    int64_t n_in = 0, n_out = 0;
    int g = 0;
    size_t bytes = 0;
};

namespace {

struct weights {
    static constexpr int chunk = 32;
    const uint4* codes;
    const __half2* scales;
    int64_t n_in, n_out;
    int g;

    // Weights 32c .. 32c + 31 of `row`: d * q + m of their group, a multiply then an add (__fmul_rn / __fadd_rn keep
    // nvcc from fusing them), as the reference dequantizes them. The code q becomes a float without an integer
    // conversion (a quarter-rate instruction that would cap the decode below the memory bandwidth): a byte permute
    // builds the float bits 0x4b0000qq = 2^23 + q, and subtracting 2^23 leaves exactly q.
    struct raw {
        uint4 q;
        __half2 dm;
    };
    __device__ raw load(int64_t row, int64_t c) const {
        return raw{__ldg(codes + row * (n_in / 32) + c), __ldg(scales + row * (n_in / g) + (32 * c) / g)};
    }
    __device__ void decode(const raw& r, float (&w)[chunk]) const {
        const float2 dm = __half22float2(r.dm);
        const uint32_t words[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint32_t lo = words[j] & 0x0f0f0f0fu, hi = (words[j] >> 4) & 0x0f0f0f0fu;
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                // Selector 0x754<b>: result byte 0 = byte b of the codes, bytes 1-2 = 0x00, byte 3 = 0x4b.
                const float ql = __int_as_float(__byte_perm(lo, 0x4b000000u, 0x7540u + b)) - 8388608.0f;
                const float qh = __int_as_float(__byte_perm(hi, 0x4b000000u, 0x7540u + b)) - 8388608.0f;
                w[4 * j + b] = __fadd_rn(__fmul_rn(dm.x, ql), dm.y);
                w[16 + 4 * j + b] = __fadd_rn(__fmul_rn(dm.x, qh), dm.y);
            }
        }
    }
    __device__ float finish(int64_t, float acc) const {
        return acc;
    }
};

std::string cuda_failure(const char* what, cudaError_t e) {
    return std::string(what) + " failed: " + cudaGetErrorString(e);
}

}  // namespace

int32_t prepare(const troupe_weight* w, int g, const troupe_host_services* host, device_weight** out,
                std::string* error) {
    *out = nullptr;
    const int64_t n_in = w->n_in, n_out = w->n_out;
    const int64_t n_chunks = n_in / 32, n_groups = n_in / g;
    const size_t code_bytes = static_cast<size_t>(n_out * n_chunks) * 16;
    const size_t scale_bytes = static_cast<size_t>(n_out * n_groups) * 4;
    std::vector<uint8_t> host_copy(code_bytes + scale_bytes);
    uint8_t* codes = host_copy.data();
    uint8_t* scales = host_copy.data() + code_bytes;
    struct pack_job {
        const troupe_weight* w;
        int g;
        uint8_t *codes, *scales;
    } job{w, g, codes, scales};
    const auto run = [](void* ctx, int64_t r0, int64_t r1) {
        const auto* j = static_cast<const pack_job*>(ctx);
        pack_rows(j->w, j->g, j->codes, j->scales, r0, r1);
    };
    if (host == nullptr || !TROUPE_HAS_FIELD(host, troupe_host_services, parallel_for) ||
        host->parallel_for == nullptr || host->parallel_for(host->host_ctx, n_out, run, &job) != TROUPE_OK) {
        run(&job, 0, n_out);  // no host pool (or it failed): the loader's thread does it all
    }
    auto d = std::make_unique<device_weight>();
    d->bytes = code_bytes + scale_bytes;
    if (const cudaError_t e = cudaMalloc(&d->memory, d->bytes); e != cudaSuccess) {
        d->memory = nullptr;
        *error =
            "cannot allocate " + std::to_string(d->bytes >> 20) + " MiB of device memory: " + cudaGetErrorString(e);
        return TROUPE_ERR_OUT_OF_MEMORY;
    }
    if (const cudaError_t e = cudaMemcpy(d->memory, host_copy.data(), d->bytes, cudaMemcpyHostToDevice);
        e != cudaSuccess) {
        *error = cuda_failure("copying the weight to the device", e);
        release(d.release());
        return TROUPE_ERR_INTERNAL;
    }
    auto* mem = static_cast<uint8_t*>(d->memory);
    d->codes = reinterpret_cast<const uint4*>(mem);  // code_bytes is a multiple of 16: the scales stay aligned
    d->scales = reinterpret_cast<const __half2*>(mem + code_bytes);
    d->n_in = n_in;
    d->n_out = n_out;
    d->g = g;
    *out = d.release();
    return TROUPE_OK;
}

size_t prepared_bytes(const device_weight* w) {
    return w == nullptr ? 0 : w->bytes;
}

int32_t matmul(const device_weight* w, const float* x, float* y, int64_t n_tokens, void* stream, std::string* error) {
    const weights p{w->codes, w->scales, w->n_in, w->n_out, w->g};
    if (const cudaError_t e = cuda_quant::launch_matmul(p, x, y, n_tokens, static_cast<cudaStream_t>(stream));
        e != cudaSuccess) {
        *error = cuda_failure("launching the w4a16 product", e);
        return TROUPE_ERR_INTERNAL;
    }
    return TROUPE_OK;
}

void release(device_weight* w) {
    if (w == nullptr) return;
    if (w->memory != nullptr) cudaFree(w->memory);
    delete w;
}

}  // namespace troupe::w4a16_cuda
