// Internal: the prefill path's blocking, shared by the ISA builds (w4a16_avx2.cpp, w4a16_avx512.cpp), which each
// include it once with their own flags (internal linkage, so no copy built for one ISA runs on another).
//
//   for each row block of RB = 4 * K::nr rows (the last one zero-padded):
//     for each chunk of kc <= 1024 columns (a multiple of every group size):
//       wbuf [RB, kc] = the rows dequantized (K::dequant)
//       for each strip of K::nt tokens of xt:            xt strip [kc, nt] stays in L2 for the block's tiles
//         for each tile of K::nr rows:  acc [nr, nt] (+)= wbuf rows * xt strip   (K::tile; FMA in k order)
//     y [t, r] = acc of the block (transposed out)
//
// The accumulators of a block live in ybuf [RB, n_pad] between chunks, so every sum runs over k in order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "w4a16_format.h"

namespace troupe::w4a16 {
namespace {

constexpr int64_t k_chunk = 1024;

template <class K>
void prefill_blocks(const matrix& w, const float* xt, int64_t n_pad, int64_t n_tokens, float* y, int64_t r0,
                    int64_t r1) {
    constexpr int64_t rb_rows = 4 * K::nr;
    // Scratch of this call (no thread_local: one with a destructor would keep the plugin from unloading).
    const int64_t kc_max = std::min(k_chunk, w.n_in);
    std::vector<float> wbuf(static_cast<size_t>(rb_rows * kc_max));  // [rb_rows, kc]
    std::vector<float> ybuf(static_cast<size_t>(rb_rows * n_pad));   // [rb_rows, n_pad]
    for (int64_t rb = r0; rb < r1; rb += rb_rows) {
        const int64_t nr = std::min(rb_rows, r1 - rb);
        for (int64_t k0 = 0; k0 < w.n_in; k0 += k_chunk) {
            const int64_t kc = std::min(k_chunk, w.n_in - k0);
            for (int64_t i = 0; i < rb_rows; ++i) {
                float* dst = wbuf.data() + i * kc;
                if (i < nr) {
                    K::dequant(w, rb + i, k0, kc, dst);
                } else {
                    std::fill(dst, dst + kc, 0.0f);
                }
            }
            for (int64_t t0 = 0; t0 < n_pad; t0 += K::nt) {
                for (int64_t i = 0; i < rb_rows; i += K::nr) {
                    K::tile(wbuf.data() + i * kc, kc, xt + k0 * n_pad + t0, n_pad, ybuf.data() + i * n_pad + t0, n_pad,
                            k0 == 0);
                }
            }
        }
        for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t i = 0; i < nr; ++i) y[t * w.n_out + rb + i] = ybuf[i * n_pad + t];
        }
    }
}

}  // namespace
}  // namespace troupe::w4a16
