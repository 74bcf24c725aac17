// The backend's context (one device, its lanes, the cuBLASLt handle) and the small helpers every file
// of the backend shares: error strings for the C ABI, device buffers, lane ordering.
//
// Lanes: lane i owns stream i. Before work is enqueued on a lane it waits for the last event recorded
// on every other lane (begin_lane); after, it records its own (end_lane). So work on different lanes
// is ordered as it was issued from the host, and the copy lane never races the compute lane on the
// same KV blocks, while independent work still overlaps with the host. With explicit_order (revision 5)
// begin_lane waits for nothing: the host orders the lanes with events (troupe_cuda_event).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_backend_abi.h"

namespace troupe::cuda {

// Sets the calling thread's error message and returns it (the ABI's "NULL or message" convention).
const char* fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#define TROUPE_CUDA_TRY(expr)                                                                       \
    do {                                                                                            \
        const cudaError_t troupe_e_ = (expr);                                                       \
        if (troupe_e_ != cudaSuccess)                                                               \
            return ::troupe::cuda::fail("%s failed: %s (%s)", #expr, cudaGetErrorString(troupe_e_), \
                                        cudaGetErrorName(troupe_e_));                               \
    } while (0)

#define TROUPE_CUDA_TRY_STATUS(expr)                          \
    do {                                                      \
        if (const char* troupe_m_ = (expr)) return troupe_m_; \
    } while (0)

// Runs fn (returning const char*) and turns any C++ exception into a message: nothing crosses the ABI.
template <class fn_t>
const char* guarded(fn_t&& fn) {
    try {
        return fn();
    } catch (const std::exception& e) {
        return fail("troupe_cuda: %s", e.what());
    } catch (...) {
        return fail("troupe_cuda: unknown exception");
    }
}

// Owned device memory; grow() keeps nothing of the old contents.
class device_buffer {
public:
    device_buffer() = default;
    ~device_buffer();
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;
    device_buffer(device_buffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr, o.bytes_ = 0; }

    const char* allocate(size_t bytes, const char* what);  // frees the old memory first
    const char* grow(size_t bytes, const char* what);      // allocate() if bytes > size()
    void* data() const { return ptr_; }
    size_t size() const { return bytes_; }
    template <class T>
    T* as(size_t byte_offset = 0) const {
        return reinterpret_cast<T*>(static_cast<char*>(ptr_) + byte_offset);
    }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// A cached cuBLASLt plan for one product shape (cuda_matmul.cpp).
struct matmul_plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr;  // the weight, [n_in, n_out] column-major = [n_out, n_in] row-major
    cublasLtMatrixLayout_t b = nullptr;  // the activations, [n_in, n_tokens] column-major
    cublasLtMatrixLayout_t c = nullptr;  // the output, [n_out, n_tokens] column-major, F32
    cublasLtMatmulAlgo_t algo{};
    bool use_lt = false;  // false: cuBLASLt offered no algorithm for this shape; the simple kernel runs it
    matmul_plan() = default;
    matmul_plan(const matmul_plan&) = delete;
    matmul_plan& operator=(const matmul_plan&) = delete;
    ~matmul_plan();
};
using matmul_key = std::tuple<uint32_t, int64_t, int64_t, int32_t, bool>;  // type, n_out, n_in, n_tokens, accumulate

}  // namespace troupe::cuda

struct troupe_cuda_context {
    int32_t device = 0;
    std::vector<cudaStream_t> streams;  // [n_lanes]
    std::vector<cudaEvent_t> last;      // [n_lanes] last work recorded on each lane
    cublasLtHandle_t lt = nullptr;
    troupe::cuda::device_buffer workspace;  // cuBLASLt workspace, lane 0 only
    std::map<troupe::cuda::matmul_key, std::unique_ptr<troupe::cuda::matmul_plan>> plans;
    troupe::cuda::device_buffer act16;         // activations rounded to F16/BF16 for the product, lane 0 only
    bool explicit_order = false;               // revision 5: lanes wait only for the host's events
    troupe::cuda::device_buffer external_out;  // a plugin product's output before it is added, lane 0 only
    bool gemv = true;                          // decode's products by launch_gemv (TROUPE_CUDA_GEMV=0: cuBLASLt)
};

struct troupe_cuda_event {
    cudaEvent_t event = nullptr;
    int32_t device = 0;
};

namespace troupe::cuda {

const char* context_create(int32_t device, int32_t n_lanes, troupe_cuda_context** out);
void context_destroy(troupe_cuda_context* ctx);
const char* begin_lane(troupe_cuda_context& ctx, int32_t lane);  // also makes ctx.device current
const char* end_lane(troupe_cuda_context& ctx, int32_t lane);
// Revision 5: an event after the work on `lane` so far (the caller owns it: event_destroy).
const char* record_event(troupe_cuda_context& ctx, int32_t lane, troupe_cuda_event** out);
void event_destroy(troupe_cuda_event* e);

size_t element_bytes(uint32_t type);  // 4, 2, 2; 0 for a type the backend does not take
const char* type_name(uint32_t type);

}  // namespace troupe::cuda
