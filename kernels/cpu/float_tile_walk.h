// Internal, for matmul_avx2.cpp and matmul_avx512.cpp: float weights times several tokens walked in tiles of 3 rows x
// 4 tokens (the rows' and tokens' remainders in smaller tiles), each level with its own tile kernel. Built with
// different ISA flags, so everything here is a template instantiated with a type local to each file.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"

namespace troupe::cpu::detail {

// Kernel::tile<L, R, T>(w, ws, x, xs, n, y, ldy): R rows of n weights at w (stride ws bytes, loaded by L, one of
// Kernel::f32 / f16 / bf16) times T tokens at x (stride xs floats) into y[t * ldy + r].
template <class Kernel>
struct float_tiles {
    template <int R, int T>
    static void at(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t r, int64_t t0) {
        const uint8_t* wr = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * w.row_stride;
        const auto* xf = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x.data) + t0 * x.stride);
        const auto xs = static_cast<int64_t>(x.stride / 4);
        float* yt = y + t0 * ldy + r;
        switch (w.type) {
            case ggml_type::f32:
                Kernel::template tile<typename Kernel::f32, R, T>(wr, w.row_stride, xf, xs, w.n_in, yt, ldy);
                break;
            case ggml_type::f16:
                Kernel::template tile<typename Kernel::f16, R, T>(wr, w.row_stride, xf, xs, w.n_in, yt, ldy);
                break;
            default:
                Kernel::template tile<typename Kernel::bf16, R, T>(wr, w.row_stride, xf, xs, w.n_in, yt, ldy);
                break;
        }
    }
};

// Tiles::at<R, T>(w, x, y, ldy, r, t0): y for rows r .. r + R - 1 and tokens t0 .. t0 + T - 1.
template <class Tiles, int R>
void float_tiles_of_rows(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r) {
    using tile_fn = void (*)(const matmul_weight&, prepared_x, float*, int64_t, int64_t, int64_t);
    static constexpr tile_fn tail[4] = {nullptr, Tiles::template at<R, 1>, Tiles::template at<R, 2>,
                                        Tiles::template at<R, 3>};
    int64_t t0 = 0;
    for (; t0 + 4 <= n_tokens; t0 += 4) Tiles::template at<R, 4>(w, x, y, ldy, r, t0);
    if (t0 < n_tokens) tail[n_tokens - t0](w, x, y, ldy, r, t0);
}

// Tokens are walked in chunks whose activations stay in L1 (32 KiB: 8 tokens of 768 floats, 4 of 2048) while all of the
// rows [r0, r1) pass over them; the rows (a work item, matmul.cpp's k_float_rows_per_item) stay in L2 across the
// chunks. Walking every token for each 3 rows instead streamed the activations from L3 (4 vector loads per 12 FMAs) and
// held prefill at 40-48% of the FMA peak on Zen 5 (troupe_kernels_bench, 512 tokens: F32 40% -> 48%, F16 52% -> 68-73%,
// BF16 52% -> 67-71%; troupe bench pp128, old and new alternated: 1B F16 112-115 -> 138-141 tokens/s, 110M F32
// 1147-1193 -> 1394-1417). Each output is still one tile's full sweep of k, so its sums are unchanged.
constexpr size_t k_float_token_chunk_bytes = 32 << 10;

template <class Tiles>
void float_rows_in_tiles(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                         int64_t r1) {
    const auto chunk = std::max<int64_t>(4, static_cast<int64_t>(k_float_token_chunk_bytes / x.stride) / 4 * 4);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += chunk) {
        const int64_t n = std::min(chunk, n_tokens - t0);
        const prepared_x xc{static_cast<const uint8_t*>(x.data) + static_cast<size_t>(t0) * x.stride, x.stride};
        float* yc = y + t0 * ldy;
        int64_t r = r0;
        for (; r + 3 <= r1; r += 3) float_tiles_of_rows<Tiles, 3>(w, xc, yc, ldy, n, r);
        for (; r < r1; ++r) float_tiles_of_rows<Tiles, 1>(w, xc, yc, ldy, n, r);
    }
}

}  // namespace troupe::cpu::detail
