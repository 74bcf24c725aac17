// Attention over the paged KV pools (declarations: cuda_kernels.h launch_attention, attention_tiles): the per-token
// kernel (decode, trees, any head size) and prefill's tiled kernel, which shares each staged key among 32 queries.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/cuda_device.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace troupe::cuda {
namespace {

using namespace device;

constexpr int attention_warps = 4;
constexpr int dims_per_lane = max_head_dim / warp_size;

// Where split warps leave their partial softmax: one arrival counter per item (zero between launches: the warp
// that combines resets it), then per (item, split) a record {m, l, acc[head_dim]}.
struct split_partials {
    int32_t n_splits;  // 1: no split, each warp writes its output
    int* counters;     // [attention_split_max_items]
    float* records;    // [n_items * n_splits, head_dim + 2]
};

// Four consecutive dims of a cache row (head_dim % 4 == 0 and the row 4-aligned): one 16-byte load for float
// pools, one 8-byte load for half pools.
__device__ __forceinline__ float4 load_kv4(const float* row, int32_t d) {
    return *reinterpret_cast<const float4*>(row + d);
}
__device__ __forceinline__ float4 load_kv4(const __half* row, int32_t d) {
    const uint2 raw = *reinterpret_cast<const uint2*>(row + d);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
    return make_float4(a.x, a.y, b.x, b.y);
}

// One warp per (token, head, split); lane l scores key position j0 + l of each chunk of 32, then every lane
// accumulates its head dimensions d = l + 32 i over the chunk's probabilities (online softmax: the running max m
// and sum l rescale the accumulator when a larger score arrives). In a tree call the keys are rows 0..last_row and
// those the token does not see score -inf (a chunk may have none it sees). With a window the rows start at the
// oldest position inside it (a tree call: that, or mask_base if lower); with softcap c each scaled score s becomes
// c tanh(s / c) before the softmax.
//
// Split-key decode (flash-decoding): with few items (a decode step has n_seqs * n_heads of them) one warp per item
// would leave most of the GPU idle and walk a long context alone, so the item's chunks are shared among up to
// n_splits warps (contiguous runs, the split count used depending on the context alone). Each writes its partial
// {m, l, acc}; the last to arrive (an atomic counter after a fence) merges them in split order and writes the output.
template <class kv_t>
__global__ void attention_kernel(const float* q, float* out, int32_t n_tokens, int32_t n_heads, int32_t n_kv_heads,
                                 int32_t head_dim, float scale, float softcap, int32_t window, kv_tables tb,
                                 const kv_t* k_pool, const kv_t* v_pool, split_partials sp) {
    __shared__ __align__(16) float q_sh[attention_warps][max_head_dim];
    const int warp = threadIdx.x / warp_size;
    const int lane = threadIdx.x % warp_size;
    const int64_t work = static_cast<int64_t>(blockIdx.x) * attention_warps + warp;
    const int64_t item = work / sp.n_splits;
    const int32_t split = static_cast<int32_t>(work % sp.n_splits);
    if (item >= static_cast<int64_t>(n_tokens) * n_heads) return;  // whole warp leaves together
    const int32_t t = static_cast<int32_t>(item / n_heads);
    const int32_t h = static_cast<int32_t>(item % n_heads);
    const int32_t kv_head = h / (n_heads / n_kv_heads);
    const int32_t kv_width = n_kv_heads * head_dim;

    const int32_t seq = tb.seq_of[t];
    const int32_t pos = last_row(tb, t);
    const int32_t first = window > 0 ? max(0, tb.positions[t] - window + 1) : 0;
    const int32_t start = tb.rows == nullptr ? first : min(first, tb.mask_base[t]);
    // This warp's chunks of 32 rows: split s of `used` takes chunks [s * n / used, (s + 1) * n / used).
    const int32_t n_chunks = (pos - start + warp_size) / warp_size;
    const int32_t used = min(sp.n_splits, n_chunks);
    if (split >= used) return;
    const int32_t chunk_begin = static_cast<int32_t>(static_cast<int64_t>(split) * n_chunks / used);
    const int32_t chunk_end = static_cast<int32_t>(static_cast<int64_t>(split + 1) * n_chunks / used);

    const float* qh = q + item * head_dim;
    for (int32_t d = lane; d < head_dim; d += warp_size) q_sh[warp][d] = qh[d] * scale;
    __syncwarp();
    const bool by4 = head_dim % 4 == 0;  // rows start 4-aligned too: kv_width and the pools' bases are
    float m = -INFINITY;
    float l = 0.0f;
    float acc[dims_per_lane];
#pragma unroll
    for (int i = 0; i < dims_per_lane; ++i) acc[i] = 0.0f;

    for (int32_t j0 = start + chunk_begin * warp_size; j0 < start + chunk_end * warp_size; j0 += warp_size) {
        const int32_t j = j0 + lane;
        const bool seen = j <= pos && sees(tb, t, j, first);
        float score = -INFINITY;
        if (seen) {
            const kv_t* kr = k_pool + cache_row(tb, seq, j, kv_width) + static_cast<size_t>(kv_head) * head_dim;
            float dot = 0.0f;
            if (by4) {
                for (int32_t d = 0; d < head_dim; d += 4) {
                    const float4 kv = load_kv4(kr, d);
                    const float4 qv = *reinterpret_cast<const float4*>(&q_sh[warp][d]);
                    dot += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
                }
            } else {
                for (int32_t d = 0; d < head_dim; ++d) dot += q_sh[warp][d] * load_kv(kr, d);
            }
            score = softcap > 0.0f ? softcap * tanhf(dot / softcap) : dot;
        }
        const unsigned seen_lanes = __ballot_sync(full_mask, seen);
        if (seen_lanes == 0) continue;                  // a tree call's chunk of rows the token does not see
        const float m_new = fmaxf(m, warp_max(score));  // finite: some lane sees its row
        const float correction = expf(m - m_new);       // 0 on the first chunk seen (m = -inf)
        const float p = seen ? expf(score - m_new) : 0.0f;
        l = l * correction + warp_sum(p);
#pragma unroll
        for (int i = 0; i < dims_per_lane; ++i) acc[i] *= correction;
        for (unsigned left = seen_lanes; left != 0; left &= left - 1) {
            const int32_t jj = __ffs(left) - 1;
            const float pj = __shfl_sync(full_mask, p, jj);
            const kv_t* vr = v_pool + cache_row(tb, seq, j0 + jj, kv_width) + static_cast<size_t>(kv_head) * head_dim;
#pragma unroll
            for (int i = 0; i < dims_per_lane; ++i) {
                const int32_t d = lane + warp_size * i;
                if (d < head_dim) acc[i] += pj * load_kv(vr, d);
            }
        }
        m = m_new;
    }
    float* oh = out + item * head_dim;
    if (used == 1) {
#pragma unroll
        for (int i = 0; i < dims_per_lane; ++i) {
            const int32_t d = lane + warp_size * i;
            if (d < head_dim) oh[d] = acc[i] / l;
        }
        return;
    }

    // Leave the partial (a split whose rows the token does not see leaves m = -inf, l = 0: weight 0 below).
    const int32_t record = head_dim + 2;
    float* mine = sp.records + (item * sp.n_splits + split) * record;
    if (lane == 0) mine[0] = m, mine[1] = l;
#pragma unroll
    for (int i = 0; i < dims_per_lane; ++i) {
        const int32_t d = lane + warp_size * i;
        if (d < head_dim) mine[2 + d] = acc[i];
    }
    __threadfence();  // each lane's part of the record is visible device-wide
    __syncwarp();     // before lane 0 counts the arrival
    int arrived = 0;
    if (lane == 0) arrived = atomicAdd(&sp.counters[item], 1);
    arrived = __shfl_sync(full_mask, arrived, 0);
    if (arrived != used - 1) return;

    // The last split merges all of them (read through L2: the other warps' writes are not in this SM's L1).
    __threadfence();
    const float* records = sp.records + item * sp.n_splits * record;
    const float m_s = lane < used ? __ldcg(records + lane * record) : -INFINITY;
    const float l_s = lane < used ? __ldcg(records + lane * record + 1) : 0.0f;
    const float m_all = warp_max(m_s);
    const float w_s = lane < used ? expf(m_s - m_all) : 0.0f;
    const float l_all = warp_sum(w_s * l_s);
    float merged[dims_per_lane];
#pragma unroll
    for (int i = 0; i < dims_per_lane; ++i) merged[i] = 0.0f;
    for (int32_t k = 0; k < used; ++k) {
        const float w = __shfl_sync(full_mask, w_s, k);
        const float* acc_k = records + k * record + 2;
#pragma unroll
        for (int i = 0; i < dims_per_lane; ++i) {
            const int32_t d = lane + warp_size * i;
            if (d < head_dim) merged[i] += w * __ldcg(acc_k + d);
        }
    }
#pragma unroll
    for (int i = 0; i < dims_per_lane; ++i) {
        const int32_t d = lane + warp_size * i;
        if (d < head_dim) oh[d] = merged[i] / l_all;
    }
    if (lane == 0) sp.counters[item] = 0;  // ready for the next launch (same stream: after this one ends)
}

// Prefill attention, one block of 4 warps per (tile, head): a tile is up to 32 tokens of one sequence at consecutive
// positions (attention_tiles), warp w owning rows 8w..8w+7. Per chunk of 32 keys (from the first row's window start to
// the last row's position), the chunk's keys, then its values, are staged in shared memory as floats; lane l scores
// key l against each of the warp's rows (4 dims a read: q rows in shared memory, broadcast; head_dim % 4 == 0), and
// each row's online softmax runs as
// in attention_kernel, its accumulator over dims l + 32 i. Keys past a row's position or before its window score
// -inf; a row that sees none of a chunk skips it.
constexpr int tile_warps = 4;
constexpr int tile_rows_per_warp = attention_tile_rows / tile_warps;
constexpr int tile_dims_per_lane = attention_tiled_max_head_dim / warp_size;

template <class kv_t>
__global__ void attention_tiled_kernel(const float* q, float* out, int32_t n_heads, int32_t n_kv_heads,
                                       int32_t head_dim, float scale, float softcap, int32_t window, kv_tables tb,
                                       const int32_t* tiles, const kv_t* k_pool, const kv_t* v_pool) {
    // Rows of 4-float vectors; the staged keys' stride of 132 floats keeps a quarter-warp's 16-byte reads of 8 rows
    // on distinct banks.
    __shared__ __align__(16) float q_sh[attention_tile_rows][attention_tiled_max_head_dim];
    __shared__ __align__(16) float kv_sh[warp_size][attention_tiled_max_head_dim + 4];
    const int32_t t0 = tiles[2 * blockIdx.x];
    const int32_t n_rows = tiles[2 * blockIdx.x + 1];
    if (n_rows == 0) return;  // padding (the whole block leaves together)
    const int32_t h = blockIdx.y;
    const int32_t kv_head = h / (n_heads / n_kv_heads);
    const int32_t kv_width = n_kv_heads * head_dim;
    const int32_t seq = tb.seq_of[t0];
    const int warp = threadIdx.x / warp_size;
    const int lane = threadIdx.x % warp_size;

    for (int32_t r = warp; r < attention_tile_rows; r += tile_warps) {
        const float* qr = q + (static_cast<size_t>(t0 + r) * n_heads + h) * head_dim;
        for (int32_t d = lane; d < head_dim; d += warp_size) q_sh[r][d] = r < n_rows ? qr[d] * scale : 0.0f;
    }
    int32_t pos[tile_rows_per_warp], first[tile_rows_per_warp];
    float m[tile_rows_per_warp], l[tile_rows_per_warp], acc[tile_rows_per_warp][tile_dims_per_lane];
#pragma unroll
    for (int i = 0; i < tile_rows_per_warp; ++i) {
        const int32_t r = warp * tile_rows_per_warp + i;
        pos[i] = r < n_rows ? tb.positions[t0 + r] : -1;  // -1: a row past the tile sees nothing
        first[i] = window > 0 ? max(0, pos[i] - window + 1) : 0;
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < tile_dims_per_lane; ++c) acc[i][c] = 0.0f;
    }
    const int32_t lo = window > 0 ? max(0, tb.positions[t0] - window + 1) : 0;
    const int32_t hi = tb.positions[t0 + n_rows - 1];
    // Rows j0..j0+31 of one pool's kv_head (zeros past hi) go through registers into shared memory: all of a
    // thread's loads are issued together, and each chunk's loads are in flight while the chunk before computes (its
    // values during its scores, the next chunk's keys during its values), so the memory's latency is paid once.
    constexpr int stage_rows = warp_size / tile_warps;  // rows of a chunk each warp stages
    using stage_regs = float[stage_rows][tile_dims_per_lane];
    const auto fetch = [&](const kv_t* pool, int32_t j0, stage_regs& buf) {
#pragma unroll
        for (int r = 0; r < stage_rows; ++r) {
            const int32_t j = j0 + warp + tile_warps * r;
            const kv_t* row =
                j <= hi ? pool + cache_row(tb, seq, j, kv_width) + static_cast<size_t>(kv_head) * head_dim : nullptr;
#pragma unroll
            for (int c = 0; c < tile_dims_per_lane; ++c) {
                const int32_t d = lane + warp_size * c;
                buf[r][c] = row != nullptr && d < head_dim ? load_kv(row, d) : 0.0f;
            }
        }
    };
    const auto store = [&](const stage_regs& buf) {
#pragma unroll
        for (int r = 0; r < stage_rows; ++r) {
#pragma unroll
            for (int c = 0; c < tile_dims_per_lane; ++c) {
                const int32_t d = lane + warp_size * c;
                if (d < head_dim) kv_sh[warp + tile_warps * r][d] = buf[r][c];
            }
        }
    };
    stage_regs keys, values;
    fetch(k_pool, lo, keys);
    __syncthreads();

    for (int32_t j0 = lo; j0 <= hi; j0 += warp_size) {
        store(keys);
        fetch(v_pool, j0, values);
        __syncthreads();
        const int32_t j = j0 + lane;
        float dot[tile_rows_per_warp];
#pragma unroll
        for (int i = 0; i < tile_rows_per_warp; ++i) dot[i] = 0.0f;
        const float4* k4 = reinterpret_cast<const float4*>(kv_sh[lane]);
        for (int32_t d4 = 0; d4 < head_dim / 4; ++d4) {
            const float4 kd = k4[d4];
#pragma unroll
            for (int i = 0; i < tile_rows_per_warp; ++i) {
                const float4 qd = reinterpret_cast<const float4*>(q_sh[warp * tile_rows_per_warp + i])[d4];
                dot[i] += qd.x * kd.x + qd.y * kd.y + qd.z * kd.z + qd.w * kd.w;
            }
        }
        float p[tile_rows_per_warp];
#pragma unroll
        for (int i = 0; i < tile_rows_per_warp; ++i) {
            const bool seen = j <= pos[i] && j >= first[i];
            const float score = seen ? (softcap > 0.0f ? softcap * tanhf(dot[i] / softcap) : dot[i]) : -INFINITY;
            const float chunk_max = warp_max(score);
            p[i] = 0.0f;
            if (chunk_max == -INFINITY) continue;  // the row sees none of these keys (warp-uniform)
            const float m_new = fmaxf(m[i], chunk_max);
            const float correction = expf(m[i] - m_new);  // 0 on the row's first chunk (m = -inf)
            p[i] = seen ? expf(score - m_new) : 0.0f;
            l[i] = l[i] * correction + warp_sum(p[i]);
#pragma unroll
            for (int c = 0; c < tile_dims_per_lane; ++c) acc[i][c] *= correction;
            m[i] = m_new;
        }
        if (j0 + warp_size <= hi) fetch(k_pool, j0 + warp_size, keys);
        __syncthreads();
        store(values);
        __syncthreads();
        for (int32_t jj = 0; jj < warp_size; ++jj) {
            float pj[tile_rows_per_warp];
#pragma unroll
            for (int i = 0; i < tile_rows_per_warp; ++i) pj[i] = __shfl_sync(full_mask, p[i], jj);
#pragma unroll
            for (int c = 0; c < tile_dims_per_lane; ++c) {
                const int32_t d = lane + warp_size * c;
                const float vd = d < head_dim ? kv_sh[jj][d] : 0.0f;
#pragma unroll
                for (int i = 0; i < tile_rows_per_warp; ++i) acc[i][c] += pj[i] * vd;
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < tile_rows_per_warp; ++i) {
        const int32_t r = warp * tile_rows_per_warp + i;
        if (r >= n_rows) continue;
        float* orow = out + (static_cast<size_t>(t0 + r) * n_heads + h) * head_dim;
#pragma unroll
        for (int c = 0; c < tile_dims_per_lane; ++c) {
            const int32_t d = lane + warp_size * c;
            if (d < head_dim) orow[d] = acc[i][c] / l[i];
        }
    }
}

}  // namespace

void launch_attention(const float* q, float* out, int32_t n_tokens, int32_t n_heads, int32_t n_kv_heads,
                      int32_t head_dim, float scale, const attention_features& f, const kv_tables& tables, bool kv_f16,
                      const void* k_pool, const void* v_pool, cudaStream_t stream, void* split_scratch,
                      const int32_t* tiles, int32_t n_tiles) {
    const int64_t n_items = static_cast<int64_t>(n_tokens) * n_heads;
    if (n_items == 0) return;
    if (tiles != nullptr && n_tiles > 0) {
        const dim3 grid(n_tiles, n_heads);
        const int32_t threads = tile_warps * warp_size;
        if (kv_f16) {
            attention_tiled_kernel<__half><<<grid, threads, 0, stream>>>(
                q, out, n_heads, n_kv_heads, head_dim, scale, f.softcap, f.window, tables, tiles,
                static_cast<const __half*>(k_pool), static_cast<const __half*>(v_pool));
        } else {
            attention_tiled_kernel<float><<<grid, threads, 0, stream>>>(
                q, out, n_heads, n_kv_heads, head_dim, scale, f.softcap, f.window, tables, tiles,
                static_cast<const float*>(k_pool), static_cast<const float*>(v_pool));
        }
        return;
    }
    // Split the keys where the items alone would not fill the device (cuda_kernels.h attention_split_*).
    split_partials sp{1, nullptr, nullptr};
    if (split_scratch != nullptr) {
        const int64_t n_splits = std::min<int64_t>(attention_max_splits, attention_split_max_items * 2 / n_items);
        if (n_splits >= 2) {
            sp.n_splits = static_cast<int32_t>(n_splits);
            sp.counters = static_cast<int*>(split_scratch);
            sp.records = static_cast<float*>(split_scratch) + attention_split_max_items;
        }
    }
    const int32_t grid = blocks_for(n_items * sp.n_splits, attention_warps);
    const int32_t threads = attention_warps * warp_size;
    if (kv_f16) {
        attention_kernel<__half><<<grid, threads, 0, stream>>>(
            q, out, n_tokens, n_heads, n_kv_heads, head_dim, scale, f.softcap, f.window, tables,
            static_cast<const __half*>(k_pool), static_cast<const __half*>(v_pool), sp);
    } else {
        attention_kernel<float><<<grid, threads, 0, stream>>>(
            q, out, n_tokens, n_heads, n_kv_heads, head_dim, scale, f.softcap, f.window, tables,
            static_cast<const float*>(k_pool), static_cast<const float*>(v_pool), sp);
    }
}

int32_t attention_max_tiles(int32_t n_tokens, int32_t n_seqs) {
    return n_seqs + n_tokens / attention_tile_rows;
}

bool attention_tiles(const int32_t* seq_of, const int32_t* positions, int32_t n_tokens, int32_t n_seqs,
                     int32_t head_dim, bool tree, std::vector<int32_t>& tiles) {
    tiles.clear();
    if (tree || head_dim > attention_tiled_max_head_dim || head_dim % 4 != 0 || n_tokens <= n_seqs) return false;
    const int32_t max_tiles = attention_max_tiles(n_tokens, n_seqs);
    int32_t start = 0;
    for (int32_t t = 1; t <= n_tokens; ++t) {
        const bool ends = t == n_tokens || seq_of[t] != seq_of[t - 1] || positions[t] != positions[t - 1] + 1 ||
                          t - start == attention_tile_rows;
        if (!ends) continue;
        if (static_cast<int32_t>(tiles.size()) / 2 == max_tiles) return false;
        tiles.push_back(start);
        tiles.push_back(t - start);
        start = t;
    }
    tiles.resize(static_cast<size_t>(2) * max_tiles, 0);
    return true;
}

}  // namespace troupe::cuda
