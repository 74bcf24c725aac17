// CPU kernels of the q8 quant plugin, Q8_0 weights in one of two recipes:
//
//   weight row  : n_in / 32 blocks of {fp16 d, int8 q[32]}, w = d * q
//   W8A16 (activations float, the default): each weight block dequantized exactly, multiplied with the float32
//                 activations in float (ref::matmul_float_act's recipe; golden/rand10M-greedy-floatact.json)
//   W8A8  (activations int8, llama.cpp's recipe): activations quantized to Q8_0 blocks per token row, then per
//                 block int dot(q_w, q_x) * d_w * d_x (golden/rand10M-greedy.json)
//
// quantize_rows turns float rows (F32, F16 or BF16 as stored) into Q8_0 blocks at load, padding each row
// with zeros up to n_in_padded (a multiple of 32) so rows of any length can be quantized online.
// Types are the SDK's (troupe/types.h). Two implementations of panel_bytes / pack_panels / matmul, one linked:
//   q8_kernels_troupe.cpp  troupe's CPU kernel library (troupe_kernels: AVX2 / AVX-512 VNNI dot products, 16-row
//                          panels), in a build of the troupe tree. The one file of the
//                          plugin that includes troupe headers outside the SDK: the binding to that library;
//   q8_kernels_scalar.cpp  a scalar loop with the same recipes, SDK-only (e.g. a build against the installed SDK).
#pragma once

#include <troupe/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>

namespace troupe::q8 {

using block_q8_0 = troupe_block_q8_0;
constexpr int qk8_0 = TROUPE_QK8_0;

using range_fn = std::function<void(int64_t, int64_t)>;
using parallel_fn = std::function<void(int64_t n, const range_fn& fn)>;
// One contiguous share of [0, n) per thread in pieces of `grain` items (the host's parallel_ranges, troupe_parallel
// version 3): what decode-sized products stream the weights with. Empty: parallel_fn's chunks.
using ranges_fn = std::function<void(int64_t n, int64_t grain, const range_fn& fn)>;

// What the activations are when they meet the Q8_0 weights (params.activations).
enum class activations { float32, int8 };

// ggml's Q8_0 quantizer: d = amax / 127 (stored as fp16), q = round(x / d).
void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n);

// Rows [begin, end) of `src` (TROUPE_TYPE_F32, _F16 or _BF16; n_in elements, row_stride bytes apart) into
// dst rows of n_in_padded / 32 blocks.
void quantize_rows(uint32_t type, const void* src, size_t row_stride, int64_t n_in, int64_t n_in_padded,
                   block_q8_0* dst, int64_t begin, int64_t end);

// The weights repacked into the kernel library's 16-row panels, which make a step of many tokens cost far
// less than that many single steps; only where the plugin is built with troupe_kernels and the CPU has the
// panel kernels (AVX-512 VNNI), else panel_bytes is 0 and nothing is packed.
size_t panel_bytes(int64_t n_in, int64_t n_out, activations recipe);
// Returns the form the codes were packed in (the library picks it by CPU level), for matmul.
[[nodiscard]] int pack_panels(const block_q8_0* w, int64_t n_in, int64_t n_out, size_t row_stride, void* dst);

// y[n_tokens, n_out] = x[n_tokens, n_in] * W^T, W: n_out rows of n_in / 32 Q8_0 blocks, row_stride bytes apart,
// and its panels (or null) from pack_panels with the form it returned, used where the kernels prefer them; the rows
// must stay valid.
void matmul(const block_q8_0* w, const void* panels, int panel_form, int64_t n_in, int64_t n_out, size_t row_stride,
            const float* x, float* y, int64_t n_tokens, const parallel_fn& parallel_for, activations recipe,
            const ranges_fn& parallel_ranges = {});

// Which implementation matmul uses: "troupe_kernels" or "scalar".
const char* matmul_implementation();

}  // namespace troupe::q8
