// One-pass (online softmax) attention driver per (token, kv head), for decode steps: the tiled driver
// (attention_tiled.h) hands it the tiles too small to fill its vectors. Instantiated once per instruction
// set by the file that includes it (attention_avx2.cpp, attention_avx512.cpp) with that set's vector
// helpers. Everything here has internal linkage and uses no library templates (no std::vector): a copy
// built with AVX-512 flags must never be merged at link time with the copy other CPUs run.
//
// Per query head, over positions j = 0..pos in chunks of 16:   s_j = scale * q . k_j
//   m = max so far, l = sum of exp(s - m), acc = sum of exp(s - m) * v_j; when a chunk raises the max the
//   running l and acc are rescaled once by exp(m_old - m_new); the chunk's 16 exponentials are taken
//   together (one vector exp where the instruction set has one). out = acc / l.
// The heads of a GQA group are done heads_per_pass at a time, so each K/V row is loaded once per pass.
#pragma once

#include <math.h>

#include "attention_kernels.h"
#include "kv_cursor.h"

namespace troupe::gqa {
namespace {

// isa must provide: dot(a, b, n); axpy(acc, w, v, n): acc += w * v; scale(out, acc, f, n): out = f * acc
// (out may be acc); exp_shifted(s, n, m): s[i] = exp(s[i] - m) for i < n (n <= chunk).
constexpr int32_t chunk = 16;
constexpr int32_t prefetch_distance = 8;  // positions

template <class isa>
void attend_online(const troupe_attention_call& call, int64_t begin, int64_t end) {
    const int32_t group = call.n_heads / call.n_kv_heads;
    const int32_t hd = call.head_dim;
    alignas(64) float acc[heads_per_pass * max_head_dim];  // [heads_per_pass, head_dim]
    float m[heads_per_pass];
    float l[heads_per_pass];
    for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / call.n_kv_heads;
        const int32_t kv_head = static_cast<int32_t>(item % call.n_kv_heads);
        const int32_t pos = call.positions[t];
        const int32_t* table = call.block_tables[call.seq_of[t]];
        for (int32_t g0 = 0; g0 < group; g0 += heads_per_pass) {
            const int32_t n_g = group - g0 < heads_per_pass ? group - g0 : heads_per_pass;
            const size_t head0 = static_cast<size_t>(t) * call.n_heads + static_cast<size_t>(kv_head) * group + g0;
            const float* q = call.q + head0 * hd;
            for (int32_t g = 0; g < n_g; ++g) {
                m[g] = -INFINITY;
                l[g] = 0.0f;
            }
            for (int32_t i = 0; i < n_g * hd; ++i) acc[i] = 0.0f;
            alignas(64) float sc[heads_per_pass][chunk];  // this chunk's scores, then their weights
            size_t off[chunk];                            // pool offsets of this chunk's rows
            kv_cursor rows = kv_cursor::at(call, table, kv_head, 0);
            kv_cursor ahead = kv_cursor::at(call, table, kv_head, prefetch_distance);
            for (int32_t j0 = 0; j0 <= pos; j0 += chunk) {
                const int32_t n = pos + 1 - j0 < chunk ? pos + 1 - j0 : chunk;
                for (int32_t jj = 0; jj < n; ++jj) {
                    off[jj] = rows.next();
                    if (j0 + jj + prefetch_distance <= pos) {  // rows of one kv head are strided: help the prefetcher
                        const size_t next = ahead.next();
                        for (int32_t d = 0; d < hd; d += 16) {
                            __builtin_prefetch(call.k_pool + next + d);
                            __builtin_prefetch(call.v_pool + next + d);
                        }
                    }
                    const float* k = call.k_pool + off[jj];
                    for (int32_t g = 0; g < n_g; ++g) {
                        sc[g][jj] = isa::dot(q + static_cast<size_t>(g) * hd, k, hd) * call.scale;
                    }
                }
                for (int32_t g = 0; g < n_g; ++g) {
                    float cm = sc[g][0];
                    for (int32_t jj = 1; jj < n; ++jj) cm = sc[g][jj] > cm ? sc[g][jj] : cm;
                    if (cm > m[g]) {
                        const float c = expf(m[g] - cm);  // 0 on the first chunk (m = -inf)
                        float* a = acc + static_cast<size_t>(g) * hd;
                        isa::scale(a, a, c, hd);
                        l[g] *= c;
                        m[g] = cm;
                    }
                    isa::exp_shifted(sc[g], n, m[g]);
                    for (int32_t jj = 0; jj < n; ++jj) l[g] += sc[g][jj];
                }
                for (int32_t jj = 0; jj < n; ++jj) {
                    const float* v = call.v_pool + off[jj];
                    for (int32_t g = 0; g < n_g; ++g) isa::axpy(acc + static_cast<size_t>(g) * hd, sc[g][jj], v, hd);
                }
            }
            float* out = call.out + head0 * hd;
            for (int32_t g = 0; g < n_g; ++g) {
                isa::scale(out + static_cast<size_t>(g) * hd, acc + static_cast<size_t>(g) * hd, 1.0f / l[g], hd);
            }
        }
    }
}

}  // namespace
}  // namespace troupe::gqa
