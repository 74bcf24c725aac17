// Internal, for the panel kernel files only (q8_panels_avx512.cpp, q8_panels_float_act_avx512.cpp,
// q8_panels_avx2.cpp): the walk over panels and token tiles that the integer and float-activation panel kernels
// share, and the prefetch of the panel stream. Built with different ISA flags, so everything here is a template or
// internal to each file (no one out-of-line copy the linker could pick for the wrong level).
//
// Loop order: a chunk of tokens whose activations fit in L2 outermost, then the panels of the work item, then
// tiles of up to max_tile tokens of equal size (within one): a panel (13 KB for Q8_0 n_in 768) is read from
// memory once per chunk and from L1 for the other tiles. The first tile of a panel is told so, to prefetch ahead
// along the contiguous panels (decode is one stream per thread).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cpu/q8_panels_kernels.h"

namespace troupe::cpu::detail {

constexpr int k_panel_prefetch_distance = 8192;    // bytes ahead of the loads (as the row kernels)
constexpr size_t k_panel_chunk_bytes = 256 << 10;  // activations per token chunk (an L2 share)

static inline void prefetch_panel_ahead(const uint8_t* p, size_t n_bytes) {
    for (size_t i = 0; i < n_bytes; i += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p) + k_panel_prefetch_distance + i, _MM_HINT_T0);
#if defined(__AVX512F__)
        // And into L2 four times as far: the L1 hint alone fell behind on Zen 4 (110M Q8_0 decode, two threads,
        // alternated with the L1-only binary: faster in 9 of 11 rounds, 5-round median 240 -> 260 tok/s). Not
        // measured on the AVX2 level's machines, which keep the one hint.
        _mm_prefetch(reinterpret_cast<const char*>(p) + 4 * k_panel_prefetch_distance + i, _MM_HINT_T1);
#endif
    }
}

// The lane mask of a panel's n_rows real rows (AVX-512 masked stores).
static inline uint16_t panel_row_mask(int n_rows) {
    return static_cast<uint16_t>(n_rows >= 16 ? 0xffff : (1u << n_rows) - 1);
}

// Calls tile(panel, n_rows, p, t0, m, first) for panels [p0, p1) of w and tiles [t0, t0 + m) of n_tokens: panel is
// the panel's bytes, n_rows its real rows (16 but in the last panel), first whether this is the panel's first tile in
// this chunk.
// token_bytes: the activations of one token (for the chunk size).
template <class Tile>
void for_each_panel_tile(const matmul_weight& w, const q8_panel_geometry& g, int64_t n_tokens, int64_t p0, int64_t p1,
                         int max_tile, size_t token_bytes, const Tile& tile) {
    const auto* panels = static_cast<const uint8_t*>(w.panels);
    const int64_t chunk = std::max<int64_t>(max_tile, static_cast<int64_t>(k_panel_chunk_bytes / token_bytes));
    for (int64_t c0 = 0; c0 < n_tokens; c0 += chunk) {
        const int64_t nc = std::min(chunk, n_tokens - c0);
        const int64_t n_tiles = (nc + max_tile - 1) / max_tile;
        const int64_t base = nc / n_tiles, n_longer = nc % n_tiles;
        for (int64_t p = p0; p < p1; ++p) {
            const int n_rows = static_cast<int>(std::min<int64_t>(k_panel_rows, w.n_out - p * k_panel_rows));
            const uint8_t* panel = panels + static_cast<size_t>(p) * g.panel_bytes;
            int64_t t0 = c0;
            for (int64_t i = 0; i < n_tiles; ++i) {
                const int64_t m = base + (i < n_longer ? 1 : 0);
                tile(panel, n_rows, p, t0, static_cast<int>(m), i == 0);
                t0 += m;
            }
        }
    }
}

// The integer panel product of one level: panels [p0, p1) of w times the tokens' blocks x ([n_blocks][n_tokens]),
// tiles of up to N tokens; q8_tiles / q4_tiles[m - 1](panel, n_blocks, group_bytes, x + t0, n_tokens, y tile, ldy,
// n_rows, first) computes one panel x m tokens.
template <size_t N, class Tile>
void panel_product(const matmul_weight& w, const q8_act_block* x, int64_t n_tokens, float* y, int64_t ldy, int64_t p0,
                   int64_t p1, const std::array<Tile, N>& q8_tiles, const std::array<Tile, N>& q4_tiles) {
    const q8_panel_geometry g = q8_panel_geometry_of(w.type, w.n_in, w.n_out);
    const auto& tiles = w.type == ggml_type::q8_0 ? q8_tiles : q4_tiles;
    for_each_panel_tile(w, g, n_tokens, p0, p1, static_cast<int>(N),
                        static_cast<size_t>(g.n_blocks) * sizeof(q8_act_block),
                        [&](const uint8_t* panel, int n_rows, int64_t p, int64_t t0, int m, bool first) {
                            tiles[m - 1](panel, g.n_blocks, g.group_bytes, x + t0, n_tokens,
                                         y + t0 * ldy + p * k_panel_rows, ldy, n_rows, first);
                        });
}

// The kernel instances for tile sizes 1..N: {make.template operator()<1>(), ..., make.template operator()<N>()},
// make a lambda []<int M>() { return &kernel<..., M>; }.
template <int N, class Make>
constexpr auto tile_table(const Make& make) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
        return std::array{make.template operator()<static_cast<int>(I) + 1>()...};
    }
    (std::make_index_sequence<N>());
}

}  // namespace troupe::cpu::detail
