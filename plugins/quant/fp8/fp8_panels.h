// FP8 weights of the quant/fp8 plugin in row panels, and the products with them.
//
// Quantization (at load, from F32 / F16 / BF16 rows): one float32 scale per output row,
//   scale[r] = max_k |W[r, k]| / max_finite(format),   code[r, k] = fp8::encode(W[r, k] / scale[r])
// (round to nearest even, saturating; a row of zeros has scale 0), so W[r, k] ~ scale[r] * fp8::decode(code[r, k]).
//
// Layout. Panels of 32 rows (the last padded with zero rows), each k-major, so that a step of k reads 32
// consecutive bytes, element k of the panel's 32 rows, and a product streams each panel front to back:
//
//   panel p (rows 32p .. 32p + 31), n_in * 32 bytes:
//   +-------------------+-------------------+-----+---------------------------+
//   | k = 0: rows 0-31  | k = 1: rows 0-31  | ... | k = n_in - 1: rows 0-31   |   one fp8 code per byte
//   +-------------------+-------------------+-----+---------------------------+
//   scales: float [n_panels * 32], the padding rows' 0
//
// Each 16-byte half of a step (16 rows) is the operand of one broadcast-FMA per token: no horizontal sums.
// The SIMD kernels turn the codes into floats in registers through IEEE halves (vcvtph2ps) or float bits: an e5m2
// code is the high byte of the half with the same value; an e4m3 code s eeee mmm becomes the half s 0 eeee mmm
// 0000000, whose value is the e4m3 value times 2^-8 (normal and subnormal alike), so the kernels use scale * 256 for
// e4m3 (kernel_scales); the float-bits paths (fp8_kernels_avx512.cpp, fp8_kernels_avx2.cpp) undo their own powers of
// two.
//
// Products y[n_tokens, n_out] = x[n_tokens, n_in] * W^T: the work is split over the host's threads by panels. Tokens
// go in tiles (at most 12 for AVX-512, 6 for AVX2, balanced), each tile's activations repacked k-major ([n_in][tile])
// so the kernels broadcast them at fixed offsets (times x_prescale). A kernel call runs one panel and one tile over the
// whole row, its sums in registers. Tiles go in blocks of 8 (96 tokens on AVX-512, 768 KB of activations for rows of
// 2048, kept in L2): within a block each panel is read from memory by its first tile and from L2 by the others (and, on
// AVX2, by the second 16-row half), so a decode step streams each weight byte from memory once and a long prefill once
// per 8 tiles. (Blocks of k with partial sums kept in y, tried first, measured slower from 128 tokens on.) The kernels
// prefetch the weights 8 KB ahead: a panel is consumed at ~10 bytes a cycle, faster than the hardware prefetchers
// alone fetch it (decode on one Zen 5 core, e4m3: 16-31 GB/s from DRAM without, 40-42 GB/s with, 47 from L2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include <troupe/types.h>

#include "plugins/common/fp8.h"

namespace troupe::fp8_panels {

constexpr int64_t panel_rows = 32;
constexpr int64_t half_rows = 16;       // the rows of one 16-byte load
constexpr int64_t tiles_per_block = 8;  // token tiles that share a pass over the panels

enum class kernel { scalar, avx2, avx512 };

const char* name(kernel k);
bool cpu_has(kernel k);

// A weight in panel form (memory owned by the caller). A shard of a weight the host placed (troupe_quant_ops.place:
// panels [first_panel, ...) in a region of their own) keeps the whole weight's n_out and n_panels and holds panel
// first_panel (and its rows' scales) at the start of its arrays; kernels reach panels and rows through the accessors.
struct matrix {
    fp8::format format = fp8::format::e4m3;
    int64_t n_in = 0;
    int64_t n_out = 0;
    int64_t n_panels = 0;                  // ceil(n_out / 32)
    const uint8_t* codes = nullptr;        // [n_panels][n_in][32]
    const float* scales = nullptr;         // [n_panels * 32] row scales, fp8 value * scale = weight
    const float* kernel_scales = nullptr;  // [n_panels * 32] the scales the SIMD kernels use (see above)
    int64_t first_panel = 0;               // the panel at codes

    const uint8_t* panel_codes(int64_t p) const {
        return codes + static_cast<size_t>(p - first_panel) * static_cast<size_t>(n_in * 32);
    }
    const float* row_scales(int64_t r) const { return scales + (r - first_panel * 32); }
    const float* row_kernel_scales(int64_t r) const { return kernel_scales + (r - first_panel * 32); }
};

// The weight as products see it: shard s holds panels [panel_bounds[s], panel_bounds[s + 1]) (whole panels, from 0 to
// n_panels) as parts[s]. An unplaced weight is one shard.
struct shards {
    const matrix* parts;
    const int64_t* panel_bounds;  // [n + 1]
    int32_t n;
};

// Bytes of the codes (a multiple of 64) and of each of the two scale arrays.
size_t code_bytes(int64_t n_in, int64_t n_out);
size_t scale_bytes(int64_t n_out);

// Source row types the quantizer reads.
enum class source_type : uint32_t { f32 = TROUPE_TYPE_F32, f16 = TROUPE_TYPE_F16, bf16 = TROUPE_TYPE_BF16 };

// Quantizes rows [row_begin, row_end) of src (n_in elements each, row_stride bytes apart) into the panel form:
// codes, scales and kernel_scales (writable views of m's arrays). Returns the first row holding a NaN or an
// infinity, or -1 (such a row is left unwritten).
int64_t quantize_rows(source_type type, const void* src, size_t row_stride, const matrix& m, uint8_t* codes,
                      float* scales, float* kernel_scales, int64_t row_begin, int64_t row_end);

using range_fn = std::function<void(int64_t, int64_t)>;
// Splits [0, n) over threads; bytes_per_item > 0 marks a loop that streams the weights (bytes each item reads),
// which the plugin runs with one contiguous share per thread where the host offers it (parallel_ranges), or, given
// `bounds` ([n_shares + 1]: a placed weight's shards in items), share s on thread s (parallel_shares).
using parallel_fn =
    std::function<void(int64_t n, size_t bytes_per_item, const int64_t* bounds, int32_t n_shares, const range_fn& fn)>;

// y[n_tokens, n_out] = x[n_tokens, n_in] * W^T with kernel k (which the CPU must have).
void matmul(kernel k, const shards& w, const float* x, float* y, int64_t n_tokens, const parallel_fn& parallel_for);

// One kernel's work on one panel and one token tile: y[t][r] = scale[r] * sum_k decode(code[panel][k][r]) * xt[k][t].
// xt: the tile's activations [n_in][nt]. Rows at or past n_out are not written (a 16-row half wholly past it is
// skipped).
struct tile_call {
    const matrix* m;
    int64_t panel;
    const float* xt;  // [n_in][nt]
    int nt;           // tokens in the tile, 1 .. max_tile(kernel)
    float* y;         // the tile's first token row of the output, [nt][n_out]
};

int max_tile(kernel k);
// The factor the driver multiplies the activations by when it packs them for kernel k (exact: a power of two; 2^64
// for AVX-512 and AVX2, whose float-bits decode leaves the weights 2^-120 / 2^-112 small, fp8_kernels_avx512.cpp).
// Activations beyond 2^63 in magnitude would overflow there.
float x_prescale(kernel k);
void tile_scalar(const tile_call& c);
void tile_avx2(const tile_call& c);
void tile_avx512(const tile_call& c);

}  // namespace troupe::fp8_panels
