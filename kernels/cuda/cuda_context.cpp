// Context lifetime, lanes, device buffers and the thread-local error message (cuda_context.h).
#include "kernels/cuda/cuda_context.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace troupe::cuda {
namespace {

constexpr size_t workspace_bytes = size_t{32} << 20;

}  // namespace

const char* fail(const char* fmt, ...) {
    thread_local std::string message;
    char buf[1024];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, args);
    va_end(args);
    message = buf;
    return message.c_str();
}

device_buffer::~device_buffer() {
    if (ptr_) cudaFree(ptr_);
}

const char* device_buffer::allocate(size_t bytes, const char* what) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    if (bytes == 0) return nullptr;
    const cudaError_t e = cudaMalloc(&ptr_, bytes);
    if (e != cudaSuccess) {
        ptr_ = nullptr;
        // The failed allocation also stays as the thread's last error, which the next kernel launch's
        // cudaGetLastError would report as its own: the caller has this message, so clear it.
        cudaGetLastError();
        return fail("cudaMalloc of %.1f MiB for %s failed: %s", static_cast<double>(bytes) / (1 << 20), what,
                    cudaGetErrorString(e));
    }
    bytes_ = bytes;
    return nullptr;
}

const char* device_buffer::grow(size_t bytes, const char* what) {
    if (bytes <= bytes_) return nullptr;
    return allocate(bytes, what);
}

matmul_plan::~matmul_plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
}

const char* context_create(int32_t device, int32_t n_lanes, troupe_cuda_context** out) {
    *out = nullptr;
    int32_t n_devices = 0;
    TROUPE_CUDA_TRY(cudaGetDeviceCount(&n_devices));
    if (device < 0 || device >= n_devices) return fail("cuda device %d does not exist (%d devices)", device, n_devices);
    if (n_lanes < 1 || n_lanes > 16) return fail("a context takes 1 to 16 lanes, not %d", n_lanes);
    TROUPE_CUDA_TRY(cudaSetDevice(device));
    auto ctx = std::make_unique<troupe_cuda_context>();
    ctx->device = device;
    const char* gemv = std::getenv("TROUPE_CUDA_GEMV");
    ctx->gemv = gemv == nullptr || std::string(gemv) != "0";
    for (int32_t i = 0; i < n_lanes; ++i) {
        cudaStream_t s = nullptr;
        cudaEvent_t e = nullptr;
        if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
            cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
            if (s) cudaStreamDestroy(s);
            const char* m = fail("creating lane %d on cuda device %d failed: %s", i, device,
                                 cudaGetErrorString(cudaGetLastError()));
            context_destroy(ctx.release());
            return m;
        }
        ctx->streams.push_back(s);
        ctx->last.push_back(e);
    }
    if (const cublasStatus_t st = cublasLtCreate(&ctx->lt); st != CUBLAS_STATUS_SUCCESS) {
        ctx->lt = nullptr;
        const char* m = fail("cublasLtCreate failed: status %d", static_cast<int>(st));
        context_destroy(ctx.release());
        return m;
    }
    if (const char* m = ctx->workspace.allocate(workspace_bytes, "the cuBLASLt workspace")) {
        std::string keep = m;
        context_destroy(ctx.release());
        return fail("%s", keep.c_str());
    }
    *out = ctx.release();
    return nullptr;
}

void context_destroy(troupe_cuda_context* ctx) {
    if (!ctx) return;
    cudaSetDevice(ctx->device);
    for (cudaStream_t s : ctx->streams) cudaStreamSynchronize(s);
    ctx->plans.clear();
    if (ctx->lt) cublasLtDestroy(ctx->lt);
    for (cudaEvent_t e : ctx->last) cudaEventDestroy(e);
    for (cudaStream_t s : ctx->streams) cudaStreamDestroy(s);
    delete ctx;
}

const char* begin_lane(troupe_cuda_context& ctx, int32_t lane) {
    if (lane < 0 || lane >= static_cast<int32_t>(ctx.streams.size()))
        return fail("lane %d does not exist (the context has %zu)", lane, ctx.streams.size());
    TROUPE_CUDA_TRY(cudaSetDevice(ctx.device));
    if (ctx.explicit_order) return nullptr;
    for (size_t other = 0; other < ctx.streams.size(); ++other) {
        if (static_cast<int32_t>(other) == lane) continue;
        TROUPE_CUDA_TRY(cudaStreamWaitEvent(ctx.streams[lane], ctx.last[other], 0));
    }
    return nullptr;
}

const char* end_lane(troupe_cuda_context& ctx, int32_t lane) {
    TROUPE_CUDA_TRY(cudaGetLastError());
    TROUPE_CUDA_TRY(cudaEventRecord(ctx.last[lane], ctx.streams[lane]));
    return nullptr;
}

const char* record_event(troupe_cuda_context& ctx, int32_t lane, troupe_cuda_event** out) {
    *out = nullptr;
    if (lane < 0 || lane >= static_cast<int32_t>(ctx.streams.size()))
        return fail("lane %d does not exist (the context has %zu)", lane, ctx.streams.size());
    TROUPE_CUDA_TRY(cudaSetDevice(ctx.device));
    auto e = std::make_unique<troupe_cuda_event>();
    e->device = ctx.device;
    TROUPE_CUDA_TRY(cudaEventCreateWithFlags(&e->event, cudaEventDisableTiming));
    if (const cudaError_t r = cudaEventRecord(e->event, ctx.streams[lane]); r != cudaSuccess) {
        cudaEventDestroy(e->event);
        return fail("cudaEventRecord on lane %d failed: %s (%s)", lane, cudaGetErrorString(r), cudaGetErrorName(r));
    }
    *out = e.release();
    return nullptr;
}

void event_destroy(troupe_cuda_event* e) {
    if (!e) return;
    if (e->event) cudaEventDestroy(e->event);
    delete e;
}

size_t element_bytes(uint32_t type) {
    switch (type) {
        case TROUPE_CUDA_F32:
            return 4;
        case TROUPE_CUDA_F16:
            return 2;
        case TROUPE_CUDA_BF16:
            return 2;
        default:
            return 0;
    }
}

const char* type_name(uint32_t type) {
    switch (type) {
        case TROUPE_CUDA_F32:
            return "F32";
        case TROUPE_CUDA_F16:
            return "F16";
        case TROUPE_CUDA_BF16:
            return "BF16";
        default:
            return "unsupported";
    }
}

}  // namespace troupe::cuda
