// FP8 weights of the quant/fp8 plugin in row panels, and the products with them.
//
// Quantization (at load, from F32 / F16 / BF16 rows): one float32 scale per output row,
//   scale[r] = max_k |W[r, k]| / max_finite(format),   code[r, k] = fp8::encode(W[r, k] / scale[r])
// (round to nearest even, saturating; a row of zeros has scale 0), so W[r, k] ~ scale[r] * fp8::decode(code[r, k]).
//
// Layout. Panels of 16 rows (the last padded with zero rows), each k-major so that one 16-byte load holds element k
// of the panel's 16 rows, the operand of one broadcast-FMA per token (no horizontal sums):
//
//   panel p (rows 16p .. 16p + 15), n_in * 16 bytes:
//   +------------------+------------------+-----+--------------------------+
//   | k = 0: rows 0-15 | k = 1: rows 0-15 | ... | k = n_in - 1: rows 0-15  |   one fp8 code per byte
//   +------------------+------------------+-----+--------------------------+
//   scales: float [n_panels * 16], the padding rows' 0
//
// The SIMD kernels turn the codes into floats in registers through IEEE halves (vcvtph2ps): an e5m2 code is the high
// byte of the half with the same value; an e4m3 code s eeee mmm becomes the half s 0 eeee mmm 0000000, whose value
// is the e4m3 value times 2^-8 (normal and subnormal alike), so the kernels use scale * 256 (kernel_scale).
//
// Products y[n_tokens, n_out] = x[n_tokens, n_in] * W^T: the work is split over the host's threads by pairs of
// panels (32 rows). Tokens go in tiles (at most 12 for AVX-512, 6 for AVX2, balanced), each tile's activations
// repacked k-major ([n_in][tile]) so the kernels broadcast them at fixed offsets. With one tile (decode: up to 12 /
// 6 tokens) each panel pair is streamed once over the whole row; with more, k runs in blocks of 256 so a block of
// the pair's weights (8 KB) stays in L1 while every tile passes over it and the activations' block stays in L2,
// with partial sums kept in y.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include <troupe/types.h>

#include "plugins/common/fp8.h"

namespace troupe::fp8_panels {

constexpr int64_t panel_rows = 16;
constexpr int64_t k_block = 256;  // k per block when there is more than one token tile

enum class kernel { scalar, avx2, avx512 };

const char* name(kernel k);
bool cpu_has(kernel k);

// A weight in panel form (memory owned by the caller).
struct matrix {
    fp8::format format = fp8::format::e4m3;
    int64_t n_in = 0;
    int64_t n_out = 0;
    int64_t n_panels = 0;                  // ceil(n_out / 16)
    const uint8_t* codes = nullptr;        // [n_panels][n_in][16]
    const float* scales = nullptr;         // [n_panels * 16] row scales, fp8 value * scale = weight
    const float* kernel_scales = nullptr;  // [n_panels * 16] the scales for the half-float decode (see above)
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
using parallel_fn = std::function<void(int64_t n, const range_fn& fn)>;

// y[n_tokens, n_out] = x[n_tokens, n_in] * W^T with kernel k (which the CPU must have).
void matmul(kernel k, const matrix& m, const float* x, float* y, int64_t n_tokens, const parallel_fn& parallel_for);

// One kernel's work on one panel pair (panels p and p + 1, or p alone when it is the last), one token tile and one
// block of k: acc[t][r] (+)= sum_{k in [k0, k1)} decode(code[p][k][r]) * xt[k][t], then, when `last`,
// y[t][r] = acc * kernel_scale[r]. Partial sums live in y (rows of n_out floats) between blocks: `first` starts them
// at zero. xt: the tile's activations [n_in][nt]. Rows at or past n_out are neither read from y nor written.
struct tile_call {
    const matrix* m;
    int64_t panel;     // first panel of the pair
    int64_t n_panels;  // 1 or 2
    const float* xt;   // [n_in][nt]
    int nt;            // tokens in the tile, 1 .. max_tile(kernel)
    int64_t k0, k1;
    bool first, last;
    float* y;  // the tile's first token row of the output, [nt][n_out]
};

int max_tile(kernel k);
void tile_scalar(const tile_call& c);
void tile_avx2(const tile_call& c);
void tile_avx512(const tile_call& c);

}  // namespace troupe::fp8_panels
