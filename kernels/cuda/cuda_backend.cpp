// libtroupe_cuda.so's one exported symbol: the op table of cuda_backend_abi.h, with device discovery and
// the host-buffer kernel entry points the tests compare against CPU references.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "kernels/cuda/cuda_backend_abi.h"
#include "kernels/cuda/cuda_backend_tests.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_model.h"
#include "kernels/cuda/cuda_moe.h"

namespace troupe::cuda {
namespace {

const char* device_count(int32_t* n_devices) {
    *n_devices = 0;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return fail("no usable CUDA device: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    if (n == 0) return fail("no CUDA device found");
    *n_devices = n;
    return nullptr;
}

const char* device_info(int32_t device, troupe_cuda_device_info* info) {
    int32_t n = 0;
    TROUPE_CUDA_TRY_STATUS(device_count(&n));
    if (device < 0 || device >= n) return fail("cuda device %d does not exist (%d devices)", device, n);
    cudaDeviceProp prop{};
    TROUPE_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
    TROUPE_CUDA_TRY(cudaSetDevice(device));
    size_t free_bytes = 0, total_bytes = 0;
    TROUPE_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
    std::memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
    info->index = device;
    std::snprintf(info->name, sizeof info->name, "%s", prop.name);
    info->total_bytes = total_bytes;
    info->free_bytes = free_bytes;
    info->cc_major = prop.major;
    info->cc_minor = prop.minor;
    info->n_sms = prop.multiProcessorCount;
    return nullptr;
}

const char* test_rms_norm(troupe_cuda_context* ctx, const float* x, const float* w, float* y, int32_t n_rows,
                          int32_t dim, float eps) {
    TROUPE_CUDA_TRY_STATUS(begin_lane(*ctx, 0));
    cudaStream_t s = ctx->streams[0];
    const size_t bytes = static_cast<size_t>(n_rows) * dim * sizeof(float);
    device_buffer dx, dw, dy;
    TROUPE_CUDA_TRY_STATUS(upload(x, bytes, dx, "x", s));
    TROUPE_CUDA_TRY_STATUS(upload(w, dim * sizeof(float), dw, "w", s));
    TROUPE_CUDA_TRY_STATUS(dy.allocate(bytes, "y"));
    launch_rms_norm(dx.as<float>(), dw.as<float>(), dy.as<float>(), n_rows, dim, eps, s);
    TROUPE_CUDA_TRY_STATUS(download(y, dy, bytes, s));
    return finish(*ctx);
}

const char* test_rope(troupe_cuda_context* ctx, float* x, const int32_t* positions, int32_t n_tokens, int32_t n_heads,
                      int32_t head_dim, int32_t n_rot, float base, float freq_scale, int32_t neox) {
    if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > head_dim)
        return fail("rope rotates an even number of dimensions up to the head size %d, not %d", head_dim, n_rot);
    TROUPE_CUDA_TRY_STATUS(begin_lane(*ctx, 0));
    cudaStream_t s = ctx->streams[0];
    const size_t bytes = static_cast<size_t>(n_tokens) * n_heads * head_dim * sizeof(float);
    device_buffer dx, dp;
    TROUPE_CUDA_TRY_STATUS(upload(x, bytes, dx, "x", s));
    TROUPE_CUDA_TRY_STATUS(upload(positions, n_tokens * sizeof(int32_t), dp, "positions", s));
    launch_rope(dx.as<float>(), dp.as<int32_t>(), n_tokens, n_heads,
                rope_settings{head_dim, n_rot, base, freq_scale, neox != 0}, s);
    TROUPE_CUDA_TRY_STATUS(download(x, dx, bytes, s));
    return finish(*ctx);
}

const char* test_matmul(troupe_cuda_context* ctx, int32_t impl, const troupe_cuda_matrix* w, const float* x, float* y,
                        int32_t n_tokens) {
    TROUPE_CUDA_TRY_STATUS(begin_lane(*ctx, 0));
    cudaStream_t s = ctx->streams[0];
    device_buffer dw, dx, dy;
    device_matrix dm;
    TROUPE_CUDA_TRY_STATUS(upload_matrix(*w, "w", dw, dm, s));
    TROUPE_CUDA_TRY_STATUS(upload(x, static_cast<size_t>(n_tokens) * w->n_in * sizeof(float), dx, "x", s));
    const size_t y_bytes = static_cast<size_t>(n_tokens) * w->n_out * sizeof(float);
    TROUPE_CUDA_TRY_STATUS(dy.allocate(y_bytes, "y"));
    TROUPE_CUDA_TRY_STATUS(matmul(*ctx, dm, dx.as<float>(), dy.as<float>(), n_tokens, false,
                                  impl == TROUPE_CUDA_MATMUL_SIMPLE ? matmul_impl::simple : matmul_impl::cublaslt));
    TROUPE_CUDA_TRY_STATUS(download(y, dy, y_bytes, s));
    return finish(*ctx);
}

const char* test_matmul_group(troupe_cuda_context* ctx, const troupe_cuda_matrix* w, int32_t n, const float* x,
                              int32_t n_tokens, int32_t glu, float* const* y) {
    if (n < 1 || n > 3 || glu < 0 || glu > 2 || (glu != 0 && n != 2))
        return fail("matmul group of %d matrices with glu %d: expected 1 to 3 matrices, or 2 with glu 1 or 2", n, glu);
    TROUPE_CUDA_TRY_STATUS(begin_lane(*ctx, 0));
    cudaStream_t s = ctx->streams[0];
    device_buffer dw[3], dy[3], dx;
    device_matrix dm[3];
    for (int32_t i = 0; i < n; ++i) {
        if (w[i].n_in != w[0].n_in)
            return fail("matmul group: matrix %d has n_in %lld, not %lld", i, static_cast<long long>(w[i].n_in),
                        static_cast<long long>(w[0].n_in));
        TROUPE_CUDA_TRY_STATUS(upload_matrix(w[i], "w", dw[i], dm[i], s));
        TROUPE_CUDA_TRY_STATUS(dy[i].allocate(static_cast<size_t>(n_tokens) * w[i].n_out * sizeof(float), "y"));
    }
    TROUPE_CUDA_TRY_STATUS(upload(x, static_cast<size_t>(n_tokens) * w[0].n_in * sizeof(float), dx, "x", s));
    if (glu != 0) {
        TROUPE_CUDA_TRY_STATUS(matmul_glu(*ctx, dm[0], dm[1], dx.as<float>(), dy[0].as<float>(), dy[1].as<float>(),
                                          n_tokens, glu == 1 ? glu_kind::silu : glu_kind::gelu_tanh));
        TROUPE_CUDA_TRY_STATUS(download(y[0], dy[0], static_cast<size_t>(n_tokens) * w[0].n_out * sizeof(float), s));
        return finish(*ctx);
    }
    const float* dxf = dx.as<float>();
    if (n == 1) {
        TROUPE_CUDA_TRY_STATUS(matmul_group(*ctx, {{&dm[0], dy[0].as<float>()}}, dxf, n_tokens));
    } else if (n == 2) {
        TROUPE_CUDA_TRY_STATUS(
            matmul_group(*ctx, {{&dm[0], dy[0].as<float>()}, {&dm[1], dy[1].as<float>()}}, dxf, n_tokens));
    } else {
        TROUPE_CUDA_TRY_STATUS(
            matmul_group(*ctx, {{&dm[0], dy[0].as<float>()}, {&dm[1], dy[1].as<float>()}, {&dm[2], dy[2].as<float>()}},
                         dxf, n_tokens));
    }
    for (int32_t i = 0; i < n; ++i)
        TROUPE_CUDA_TRY_STATUS(download(y[i], dy[i], static_cast<size_t>(n_tokens) * w[i].n_out * sizeof(float), s));
    return finish(*ctx);
}

const char* test_moe_route(troupe_cuda_context* ctx, const float* logits, int32_t n_tokens, int32_t n_experts,
                           int32_t n_used, int32_t gating, int32_t norm_weights, float weights_scale, const float* bias,
                           int32_t* experts, float* weights) {
    if (n_tokens < 0 || n_experts < 1 || n_experts > TROUPE_CUDA_MAX_EXPERTS || n_used < 1 ||
        n_used > TROUPE_CUDA_MAX_EXPERTS_USED || n_used > n_experts || (gating != 1 && gating != 2))
        return fail("routing of %d tokens over %d experts (1 to %d), %d used (1 to %d), gating %d (1 or 2)", n_tokens,
                    n_experts, TROUPE_CUDA_MAX_EXPERTS, n_used, TROUPE_CUDA_MAX_EXPERTS_USED, gating);
    TROUPE_CUDA_TRY_STATUS(begin_lane(*ctx, 0));
    cudaStream_t s = ctx->streams[0];
    device_buffer dl, db, de, dw;
    const size_t pairs = static_cast<size_t>(n_tokens) * n_used;
    TROUPE_CUDA_TRY_STATUS(upload(logits, static_cast<size_t>(n_tokens) * n_experts * sizeof(float), dl, "logits", s));
    if (bias) TROUPE_CUDA_TRY_STATUS(upload(bias, static_cast<size_t>(n_experts) * sizeof(float), db, "bias", s));
    TROUPE_CUDA_TRY_STATUS(de.allocate(pairs * sizeof(int32_t), "experts"));
    TROUPE_CUDA_TRY_STATUS(dw.allocate(pairs * sizeof(float), "weights"));
    const moe_routing r{n_experts, n_used, gating, norm_weights != 0, weights_scale};
    launch_moe_route(dl.as<float>(), bias ? db.as<float>() : nullptr, n_tokens, r, de.as<int32_t>(), dw.as<float>(), s);
    TROUPE_CUDA_TRY_STATUS(download(experts, de, pairs * sizeof(int32_t), s));
    TROUPE_CUDA_TRY_STATUS(download(weights, dw, pairs * sizeof(float), s));
    return finish(*ctx);
}

const char* measure_copy(troupe_cuda_context* ctx, uint64_t bytes, int32_t reps, double* gb_per_s) {
    *gb_per_s = 0.0;
    if (bytes == 0 || reps < 1)
        return fail("copy of %llu bytes %d times: both must be positive", static_cast<unsigned long long>(bytes), reps);
    TROUPE_CUDA_TRY_STATUS(begin_lane(*ctx, 0));
    cudaStream_t s = ctx->streams[0];
    device_buffer from, to;
    TROUPE_CUDA_TRY_STATUS(from.allocate(bytes, "the copy probe's source"));
    TROUPE_CUDA_TRY_STATUS(to.allocate(bytes, "the copy probe's destination"));
    TROUPE_CUDA_TRY(cudaMemsetAsync(from.data(), 1, bytes, s));
    TROUPE_CUDA_TRY(cudaMemcpyAsync(to.data(), from.data(), bytes, cudaMemcpyDeviceToDevice, s));  // untimed
    cudaEvent_t start = nullptr, stop = nullptr;
    TROUPE_CUDA_TRY(cudaEventCreate(&start));
    if (const cudaError_t e = cudaEventCreate(&stop); e != cudaSuccess) {
        cudaEventDestroy(start);
        return fail("cudaEventCreate failed: %s", cudaGetErrorString(e));
    }
    cudaError_t e = cudaEventRecord(start, s);
    for (int32_t i = 0; i < reps && e == cudaSuccess; ++i)
        e = cudaMemcpyAsync(to.data(), from.data(), bytes, cudaMemcpyDeviceToDevice, s);
    if (e == cudaSuccess) e = cudaEventRecord(stop, s);
    if (e == cudaSuccess) e = cudaEventSynchronize(stop);
    float ms = 0.0f;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    if (e != cudaSuccess) return fail("timing the copy probe failed: %s", cudaGetErrorString(e));
    if (ms > 0.0f) *gb_per_s = 2.0 * static_cast<double>(bytes) * reps / (ms * 1e-3) / 1e9;
    return finish(*ctx);
}

const char* test_swiglu(troupe_cuda_context* ctx, const float* gate, const float* up, float* out, int64_t n) {
    TROUPE_CUDA_TRY_STATUS(begin_lane(*ctx, 0));
    cudaStream_t s = ctx->streams[0];
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    device_buffer dg, du, dout;
    TROUPE_CUDA_TRY_STATUS(upload(gate, bytes, dg, "gate", s));
    TROUPE_CUDA_TRY_STATUS(upload(up, bytes, du, "up", s));
    TROUPE_CUDA_TRY_STATUS(dout.allocate(bytes, "out"));
    launch_swiglu(dg.as<float>(), du.as<float>(), dout.as<float>(), n, s);
    TROUPE_CUDA_TRY_STATUS(download(out, dout, bytes, s));
    return finish(*ctx);
}

const char* test_geglu(troupe_cuda_context* ctx, const float* gate, const float* up, float* out, int64_t n) {
    TROUPE_CUDA_TRY_STATUS(begin_lane(*ctx, 0));
    cudaStream_t s = ctx->streams[0];
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    device_buffer dg, du, dout;
    TROUPE_CUDA_TRY_STATUS(upload(gate, bytes, dg, "gate", s));
    TROUPE_CUDA_TRY_STATUS(upload(up, bytes, du, "up", s));
    TROUPE_CUDA_TRY_STATUS(dout.allocate(bytes, "out"));
    launch_geglu(dg.as<float>(), du.as<float>(), dout.as<float>(), n, s);
    TROUPE_CUDA_TRY_STATUS(download(out, dout, bytes, s));
    return finish(*ctx);
}

const char* test_add_bias(troupe_cuda_context* ctx, float* x, const float* bias, int32_t n_rows, int32_t width) {
    if (n_rows < 0 || width <= 0) return fail("bias add of %d rows of width %d", n_rows, width);
    TROUPE_CUDA_TRY_STATUS(begin_lane(*ctx, 0));
    cudaStream_t s = ctx->streams[0];
    const size_t bytes = static_cast<size_t>(n_rows) * width * sizeof(float);
    device_buffer dx, db;
    TROUPE_CUDA_TRY_STATUS(upload(x, bytes, dx, "x", s));
    TROUPE_CUDA_TRY_STATUS(upload(bias, static_cast<size_t>(width) * sizeof(float), db, "bias", s));
    launch_add_bias(dx.as<float>(), db.as<float>(), n_rows, width, s);
    TROUPE_CUDA_TRY_STATUS(download(x, dx, bytes, s));
    return finish(*ctx);
}

const char* test_softcap(troupe_cuda_context* ctx, float* x, int64_t n, float cap) {
    if (!(cap > 0.0f) || !std::isfinite(cap)) return fail("soft-capping at %g: expected a finite cap > 0", cap);
    TROUPE_CUDA_TRY_STATUS(begin_lane(*ctx, 0));
    cudaStream_t s = ctx->streams[0];
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    device_buffer dx;
    TROUPE_CUDA_TRY_STATUS(upload(x, bytes, dx, "x", s));
    launch_softcap(dx.as<float>(), cap, n, s);
    TROUPE_CUDA_TRY_STATUS(download(x, dx, bytes, s));
    return finish(*ctx);
}

const char* test_embed(troupe_cuda_context* ctx, const troupe_cuda_matrix* table, const int32_t* tokens,
                       int32_t n_tokens, float* out) {
    for (int32_t t = 0; t < n_tokens; ++t) {
        if (tokens[t] < 0 || tokens[t] >= table->n_out)
            return fail("token %d outside the table of %lld rows", tokens[t], static_cast<long long>(table->n_out));
    }
    TROUPE_CUDA_TRY_STATUS(begin_lane(*ctx, 0));
    cudaStream_t s = ctx->streams[0];
    device_buffer dt, dtok, dout;
    device_matrix dm;
    TROUPE_CUDA_TRY_STATUS(upload_matrix(*table, "table", dt, dm, s));
    TROUPE_CUDA_TRY_STATUS(upload(tokens, n_tokens * sizeof(int32_t), dtok, "tokens", s));
    const size_t out_bytes = static_cast<size_t>(n_tokens) * table->n_in * sizeof(float);
    TROUPE_CUDA_TRY_STATUS(dout.allocate(out_bytes, "out"));
    launch_embed(static_cast<dtype>(dm.type), dm.data, dm.n_in, dtok.as<int32_t>(), n_tokens, dout.as<float>(), s);
    TROUPE_CUDA_TRY_STATUS(download(out, dout, out_bytes, s));
    return finish(*ctx);
}

// The ABI's functions: each guarded so that no C++ exception crosses into the host.
const char* abi_device_count(int32_t* n) {
    return guarded([&] { return device_count(n); });
}
const char* abi_device_info(int32_t d, troupe_cuda_device_info* info) {
    return guarded([&] { return device_info(d, info); });
}
const char* abi_context_create(int32_t device, int32_t n_lanes, troupe_cuda_context** out) {
    return guarded([&] { return context_create(device, n_lanes, out); });
}
void abi_context_destroy(troupe_cuda_context* ctx) {
    context_destroy(ctx);
}
const char* abi_context_synchronize(troupe_cuda_context* ctx) {
    return guarded([&]() -> const char* {
        TROUPE_CUDA_TRY(cudaSetDevice(ctx->device));
        for (cudaStream_t s : ctx->streams) TROUPE_CUDA_TRY(cudaStreamSynchronize(s));
        return nullptr;
    });
}
void* abi_context_stream(troupe_cuda_context* ctx, int32_t lane) {
    if (lane < 0 || lane >= static_cast<int32_t>(ctx->streams.size())) return nullptr;
    return ctx->streams[lane];
}
const char* abi_model_create(troupe_cuda_context* ctx, const troupe_cuda_model_desc* desc, troupe_cuda_model** out) {
    return guarded([&] { return model_create(ctx, desc, out); });
}
void abi_model_destroy(troupe_cuda_model* model) {
    model_destroy(model);
}
void abi_model_info(const troupe_cuda_model* model, troupe_cuda_model_info* info) {
    model_info(model, info);
}
const char* abi_model_forward(troupe_cuda_model* model, const troupe_cuda_batch* batch) {
    return guarded([&] { return model_forward(model, batch); });
}
const char* abi_model_copy_blocks(troupe_cuda_model* model, int32_t lane, const int32_t* src, const int32_t* dst,
                                  int32_t n) {
    return guarded([&] { return model_copy_blocks(model, lane, src, dst, n); });
}
const char* abi_model_read_blocks(troupe_cuda_model* model, int32_t lane, const int32_t* blocks, int32_t n,
                                  void* host) {
    return guarded([&] { return model_read_blocks(model, lane, blocks, n, host); });
}
const char* abi_model_copy_rows(troupe_cuda_model* model, int32_t lane, const int32_t* src, const int32_t* dst,
                                int32_t n) {
    return guarded([&] { return model_copy_rows(model, lane, src, dst, n); });
}
const char* abi_model_write_blocks(troupe_cuda_model* model, int32_t lane, const int32_t* blocks, int32_t n,
                                   const void* host) {
    return guarded([&] { return model_write_blocks(model, lane, blocks, n, host); });
}
const char* abi_test_rms_norm(troupe_cuda_context* ctx, const float* x, const float* w, float* y, int32_t n_rows,
                              int32_t dim, float eps) {
    return guarded([&] { return test_rms_norm(ctx, x, w, y, n_rows, dim, eps); });
}
const char* abi_test_rope(troupe_cuda_context* ctx, float* x, const int32_t* positions, int32_t n_tokens,
                          int32_t n_heads, int32_t head_dim, int32_t n_rot, float base, float freq_scale,
                          int32_t neox) {
    return guarded(
        [&] { return test_rope(ctx, x, positions, n_tokens, n_heads, head_dim, n_rot, base, freq_scale, neox); });
}
const char* abi_test_matmul(troupe_cuda_context* ctx, int32_t impl, const troupe_cuda_matrix* w, const float* x,
                            float* y, int32_t n_tokens) {
    return guarded([&] { return test_matmul(ctx, impl, w, x, y, n_tokens); });
}
const char* abi_test_attention(troupe_cuda_context* ctx, const troupe_cuda_attention_args* args) {
    return guarded([&] { return test_attention(ctx, args); });
}

const char* abi_test_mla_attention(troupe_cuda_context* ctx, const troupe_cuda_mla_attention_args* args) {
    return guarded([&] { return test_mla_attention(ctx, args); });
}
const char* abi_test_swiglu(troupe_cuda_context* ctx, const float* gate, const float* up, float* out, int64_t n) {
    return guarded([&] { return test_swiglu(ctx, gate, up, out, n); });
}
const char* abi_test_embed(troupe_cuda_context* ctx, const troupe_cuda_matrix* table, const int32_t* tokens,
                           int32_t n_tokens, float* out) {
    return guarded([&] { return test_embed(ctx, table, tokens, n_tokens, out); });
}

const char* abi_test_geglu(troupe_cuda_context* ctx, const float* gate, const float* up, float* out, int64_t n) {
    return guarded([&] { return test_geglu(ctx, gate, up, out, n); });
}
const char* abi_test_add_bias(troupe_cuda_context* ctx, float* x, const float* bias, int32_t n_rows, int32_t width) {
    return guarded([&] { return test_add_bias(ctx, x, bias, n_rows, width); });
}
const char* abi_test_matmul_group(troupe_cuda_context* ctx, const troupe_cuda_matrix* w, int32_t n, const float* x,
                                  int32_t n_tokens, int32_t glu, float* const* y) {
    return guarded([&] { return test_matmul_group(ctx, w, n, x, n_tokens, glu, y); });
}
const char* abi_test_moe_route(troupe_cuda_context* ctx, const float* logits, int32_t n_tokens, int32_t n_experts,
                               int32_t n_used, int32_t gating, int32_t norm_weights, float weights_scale,
                               const float* bias, int32_t* experts, float* weights) {
    return guarded([&] {
        return test_moe_route(ctx, logits, n_tokens, n_experts, n_used, gating, norm_weights, weights_scale, bias,
                              experts, weights);
    });
}
const char* abi_measure_copy(troupe_cuda_context* ctx, uint64_t bytes, int32_t reps, double* gb_per_s) {
    return guarded([&] { return measure_copy(ctx, bytes, reps, gb_per_s); });
}
const char* abi_test_softcap(troupe_cuda_context* ctx, float* x, int64_t n, float cap) {
    return guarded([&] { return test_softcap(ctx, x, n, cap); });
}

const char* abi_lane_record(troupe_cuda_context* ctx, int32_t lane, troupe_cuda_event** out) {
    return guarded([&] { return record_event(*ctx, lane, out); });
}
const char* abi_lane_wait(troupe_cuda_context* ctx, int32_t lane, const troupe_cuda_event* event) {
    return guarded([&]() -> const char* {
        if (lane < 0 || lane >= static_cast<int32_t>(ctx->streams.size()))
            return fail("lane %d does not exist (the context has %zu)", lane, ctx->streams.size());
        if (!event || !event->event) return fail("lane_wait on lane %d without an event", lane);
        if (event->device != ctx->device)
            return fail("lane_wait on cuda:%d for an event of cuda:%d", ctx->device, event->device);
        TROUPE_CUDA_TRY(cudaSetDevice(ctx->device));
        TROUPE_CUDA_TRY(cudaStreamWaitEvent(ctx->streams[lane], event->event, 0));
        return nullptr;
    });
}
const char* abi_lane_synchronize(troupe_cuda_context* ctx, int32_t lane) {
    return guarded([&]() -> const char* {
        if (lane < 0 || lane >= static_cast<int32_t>(ctx->streams.size()))
            return fail("lane %d does not exist (the context has %zu)", lane, ctx->streams.size());
        TROUPE_CUDA_TRY(cudaSetDevice(ctx->device));
        TROUPE_CUDA_TRY(cudaStreamSynchronize(ctx->streams[lane]));
        return nullptr;
    });
}
void abi_event_destroy(troupe_cuda_event* event) {
    event_destroy(event);
}
const char* abi_context_set_explicit_order(troupe_cuda_context* ctx, int32_t on) {
    ctx->explicit_order = on != 0;
    return nullptr;
}
const char* abi_model_forward_fenced(troupe_cuda_model* model, const troupe_cuda_batch* batch,
                                     troupe_cuda_fence_fn fence, void* arg) {
    return guarded([&] { return model_forward_fenced(model, batch, fence, arg); });
}

const char* abi_model_set_taps(troupe_cuda_model* model, uint64_t wanted, uint64_t host, troupe_cuda_tap_fn tap,
                               void* ctx) {
    if (wanted != 0 && !tap) return fail("taps (bits %llx) without a tap function", (unsigned long long)wanted);
    model->hp.tap_wanted = wanted;
    model->hp.tap_host = host & wanted;
    model->hp.tap = tap;
    model->hp.tap_ctx = ctx;
    return nullptr;
}

char build_info_text[160];

troupe_cuda_ops make_ops() {
    std::snprintf(build_info_text, sizeof build_info_text,
                  "troupe_cuda abi %u revision %u, CUDA runtime %d, built for %s", TROUPE_CUDA_ABI_VERSION,
                  TROUPE_CUDA_ABI_REVISION, CUDART_VERSION, TROUPE_CUDA_ARCHS_TEXT);
    troupe_cuda_ops ops{};
    ops.struct_size = sizeof ops;
    ops.abi_version = TROUPE_CUDA_ABI_VERSION;
    ops.build_info = build_info_text;
    ops.device_count = abi_device_count;
    ops.device_info = abi_device_info;
    ops.context_create = abi_context_create;
    ops.context_destroy = abi_context_destroy;
    ops.context_synchronize = abi_context_synchronize;
    ops.context_stream = abi_context_stream;
    ops.model_create = abi_model_create;
    ops.model_destroy = abi_model_destroy;
    ops.model_info = abi_model_info;
    ops.model_forward = abi_model_forward;
    ops.model_copy_blocks = abi_model_copy_blocks;
    ops.test_rms_norm = abi_test_rms_norm;
    ops.test_rope = abi_test_rope;
    ops.test_matmul = abi_test_matmul;
    ops.test_attention = abi_test_attention;
    ops.test_swiglu = abi_test_swiglu;
    ops.test_embed = abi_test_embed;
    ops.model_read_blocks = abi_model_read_blocks;
    ops.model_write_blocks = abi_model_write_blocks;
    ops.model_copy_rows = abi_model_copy_rows;
    ops.test_geglu = abi_test_geglu;
    ops.test_add_bias = abi_test_add_bias;
    ops.test_softcap = abi_test_softcap;
    ops.lane_record = abi_lane_record;
    ops.lane_wait = abi_lane_wait;
    ops.lane_synchronize = abi_lane_synchronize;
    ops.event_destroy = abi_event_destroy;
    ops.context_set_explicit_order = abi_context_set_explicit_order;
    ops.model_forward_fenced = abi_model_forward_fenced;
    ops.model_set_taps = abi_model_set_taps;
    ops.test_matmul_group = abi_test_matmul_group;
    ops.test_moe_route = abi_test_moe_route;
    ops.test_mla_attention = abi_test_mla_attention;
    ops.measure_copy = abi_measure_copy;
    return ops;
}

}  // namespace
}  // namespace troupe::cuda

extern "C" __attribute__((visibility("default"))) const troupe_cuda_ops* troupe_cuda_backend(void) {
    static const troupe_cuda_ops ops = troupe::cuda::make_ops();
    return &ops;
}
