// KV block copies (copy-on-write forks, kept tree paths) and swaps to / from host memory, on the lane the caller
// names (cuda_model.h).
#include "kernels/cuda/cuda_model.h"

namespace troupe::cuda {

const char* model_copy_blocks(troupe_cuda_model* model, int32_t lane, const int32_t* src, const int32_t* dst,
                              int32_t n) {
    troupe_cuda_model& m = *model;
    for (int32_t i = 0; i < n; ++i) {
        if (src[i] < 0 || src[i] >= m.n_blocks || dst[i] < 0 || dst[i] >= m.n_blocks)
            return fail("copy of block %d to block %d: the pool has %d blocks", src[i], dst[i], m.n_blocks);
    }
    TROUPE_CUDA_TRY_STATUS(begin_lane(*m.ctx, lane));
    cudaStream_t stream = m.ctx->streams[lane];
    const size_t block_bytes = m.pool_bytes / m.n_blocks;
    for (int32_t pool = 0; pool < m.n_pools; ++pool) {
        char* base = m.kv.as<char>(m.pool_bytes * pool);
        for (int32_t i = 0; i < n; ++i)
            TROUPE_CUDA_TRY(cudaMemcpyAsync(base + block_bytes * dst[i], base + block_bytes * src[i], block_bytes,
                                            cudaMemcpyDeviceToDevice, stream));
    }
    return end_lane(*m.ctx, lane);
}

const char* model_copy_rows(troupe_cuda_model* model, int32_t lane, const int32_t* src, const int32_t* dst, int32_t n) {
    troupe_cuda_model& m = *model;
    const int32_t n_rows = m.n_blocks * m.hp.block_size;
    for (int32_t i = 0; i < n; ++i) {
        if (src[i] < 0 || src[i] >= n_rows || dst[i] < 0 || dst[i] >= n_rows)
            return fail("copy of KV row %d to row %d: the pool has %d rows", src[i], dst[i], n_rows);
    }
    if (n <= 0) return nullptr;
    TROUPE_CUDA_TRY_STATUS(begin_lane(*m.ctx, lane));
    cudaStream_t stream = m.ctx->streams[lane];
    const size_t row_bytes = m.pool_bytes / n_rows;
    // In order, on one stream: a copy never runs before the ones listed earlier.
    for (int32_t i = 0; i < n; ++i) {
        for (int32_t pool = 0; pool < m.n_pools; ++pool) {
            char* base = m.kv.as<char>(m.pool_bytes * pool);
            TROUPE_CUDA_TRY(cudaMemcpyAsync(base + row_bytes * dst[i], base + row_bytes * src[i], row_bytes,
                                            cudaMemcpyDeviceToDevice, stream));
        }
    }
    return end_lane(*m.ctx, lane);
}

namespace {

enum class swap_direction { to_host, to_device };

const char* swap_name(swap_direction dir) {
    switch (dir) {
        case swap_direction::to_host:
            return "read of KV blocks to the host";
        case swap_direction::to_device:
            return "write of KV blocks from the host";
    }
    return "?";
}

// Every pool's blocks[i] <-> host (p * n + i) * block_bytes, on `lane`. Runs of consecutive block ids
// are one copy per pool. The lane is synchronized on every path after begin_lane, so no copy still
// reads or writes the host buffer once this returns, also when it fails part-way.
const char* swap_blocks(troupe_cuda_model& m, int32_t lane, const int32_t* blocks, int32_t n, char* host,
                        swap_direction dir) {
    const char* what = swap_name(dir);
    if (n < 0) return fail("%s: %d blocks", what, n);
    if (n == 0) return nullptr;
    if (!blocks || !host) return fail("%s: %d blocks without a block list or a host buffer", what, n);
    for (int32_t i = 0; i < n; ++i) {
        if (blocks[i] < 0 || blocks[i] >= m.n_blocks)
            return fail("%s: block id %d (entry %d of %d) outside the pool of %d blocks", what, blocks[i], i, n,
                        m.n_blocks);
    }
    TROUPE_CUDA_TRY_STATUS(begin_lane(*m.ctx, lane));
    cudaStream_t stream = m.ctx->streams[lane];
    const size_t block_bytes = m.pool_bytes / m.n_blocks;
    cudaError_t e = cudaSuccess;
    for (int32_t pool = 0; pool < m.n_pools && e == cudaSuccess; ++pool) {
        char* device_pool = m.kv.as<char>(m.pool_bytes * pool);
        char* host_pool = host + block_bytes * (static_cast<size_t>(pool) * n);
        for (int32_t i = 0; i < n && e == cudaSuccess;) {
            int32_t run = 1;
            while (i + run < n && blocks[i + run] == blocks[i] + run) ++run;
            char* d = device_pool + block_bytes * blocks[i];
            char* h = host_pool + block_bytes * i;
            const size_t bytes = block_bytes * run;
            e = dir == swap_direction::to_host ? cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, stream)
                                               : cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream);
            i += run;
        }
    }
    const char* ended = e == cudaSuccess ? end_lane(*m.ctx, lane) : nullptr;
    const cudaError_t synced = cudaStreamSynchronize(stream);
    if (e != cudaSuccess)
        return fail("%s: cudaMemcpyAsync failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    TROUPE_CUDA_TRY_STATUS(ended);
    if (synced != cudaSuccess)
        return fail("%s: cudaStreamSynchronize failed: %s (%s)", what, cudaGetErrorString(synced),
                    cudaGetErrorName(synced));
    return nullptr;
}

}  // namespace

const char* model_read_blocks(troupe_cuda_model* model, int32_t lane, const int32_t* blocks, int32_t n, void* host) {
    return swap_blocks(*model, lane, blocks, n, static_cast<char*>(host), swap_direction::to_host);
}

const char* model_write_blocks(troupe_cuda_model* model, int32_t lane, const int32_t* blocks, int32_t n,
                               const void* host) {
    // The buffer is only read on this path (a host-to-device copy).
    return swap_blocks(*model, lane, blocks, n, static_cast<char*>(const_cast<void*>(host)), swap_direction::to_device);
}

}  // namespace troupe::cuda
