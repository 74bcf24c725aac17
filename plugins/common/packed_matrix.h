// packed_matrix: a float32 weight matrix kept as float32, half floats, 8-bit rows or 4-bit groups for the speculative
// heads' products. Drafting reads the whole layer for a handful of rows per call, so it is bound by the bytes of its
// weights; half floats halve them, 8-bit rows (one float scale per row, round to nearest, codes -127..127) quarter
// them, 4-bit groups (q4: 32 weights share a float scale, codes 0..15 standing for -8..7 steps, as llama.cpp's Q4_0)
// take 0.625 bytes a weight, a fifth of float32. With 8-bit rows whose length is a multiple of 32, the activations are
// quantized too (blocks of 32, one scale each, as llama.cpp's Q8_0 activations) and the products are integer ones, half
// the instructions of widening each weight to float; where the CPU has AVX-512 VNNI and the rows are whole 64s, the
// codes are kept offset to unsigned (w + 128) for one vpdpbusd per 64 of them (~2x the AVX2 products). q4 rows always
// take the integer products (rows whose length is not a multiple of 32 are kept as q8 instead). A draft only proposes
// (the target verifies every token), so its precision changes acceptance, never output.
//
// q4 layout of a row: chunks of 128 weights (the last may hold 32, 64 or 96: L weights), each L / 2 bytes; byte i
// holds weight i of the chunk in its low nibble and weight L / 2 + i in its high nibble. So one 64-byte load gives
// two vectors of 64 consecutive weights (a mask, and a shift and a mask), each two groups of 32 in VNNI's lanes.
//
//   y[n, out] = x[n, in] · W^T (+ b)       W: [out][in] in the chosen format; x, y, b float32
#pragma once

#include <troupe/plugin.h>

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <new>
#include <string>
#include <vector>

namespace troupe::spec_common {

enum class weight_format { f32, f16, q8, q4 };

// std::allocator for weight streams: blocks of 2 MiB and more 2 MiB aligned and advised for transparent huge pages
// (drafting streams its layer every step; 4 KiB pages cost a TLB walk and stop the hardware prefetcher every 4 KiB).
template <class T>
struct huge_page_allocator {
    using value_type = T;
    huge_page_allocator() = default;
    template <class U>
    huge_page_allocator(const huge_page_allocator<U>&) noexcept {}
    T* allocate(size_t n);
    void deallocate(T* p, size_t) noexcept { std::free(p); }
    template <class U>
    bool operator==(const huge_page_allocator<U>&) const noexcept {
        return true;
    }
};

// "f32", "f16", "q8", "q4".
const char* weight_format_name(weight_format f);
// The format named "f32", "f16", "q8" or "q4" (a name param_reader::choice checked).
weight_format weight_format_of(const std::string& name);

// Activations [n, in] (in a multiple of 32) as int8 codes in blocks of 32 for integer products with q8 rows.
struct q8_activations {
    std::vector<int8_t> codes;       // [n, in]
    std::vector<float> scales;       // [n, in / 32] one per block
    std::vector<float> lane_scales;  // [n, in / 4] each block's scale repeated over its 8 lanes of four (VNNI)
    std::vector<float> offset;       // [n] 128 · Σ_b scale_b · Σ codes of block b: what unsigned weight codes add
    std::vector<float> block_sums;   // [n, in / 32] scale_b · Σ codes of block b (q4's codes stand for code - 8)
    void set(const float* x, int64_t n, int64_t in);
};

// The q4 products' instruction sets; a level is only called where the CPU has it (q4_best_kernel).
enum class q4_kernel { scalar, avx2, vnni };
q4_kernel q4_best_kernel();

class packed_matrix {
public:
    packed_matrix() = default;
    // Copies rows [n_rows][n_cols] into `format`.
    packed_matrix(const float* w, int64_t n_rows, int64_t n_cols, weight_format format);

    int64_t n_rows() const { return n_rows_; }
    int64_t n_cols() const { return n_cols_; }
    weight_format format() const { return format_; }
    size_t n_bytes() const;
    // Σ_i row r of W [i] · x[i].
    float row_dot(int64_t r, const float* x) const;
    // q8 or q4 with n_cols a multiple of 32: the same with row x_row of quantized activations (integer products).
    float row_dot_q8(int64_t r, const q8_activations& x, int64_t x_row) const;
    // q4: the same by the given instruction set (the scalar one is the twin the others are tested against).
    float row_dot_q4(int64_t r, const q8_activations& x, int64_t x_row, q4_kernel k) const;
    // The weight W[r][i] as the format keeps it.
    float weight(int64_t r, int64_t i) const;
    // q8 rows kept in panels of 16 (q8_row_panels.h: where the CPU has AVX-512 VNNI and rows are whole blocks of 32).
    bool has_panels() const { return !panels_.empty(); }
    // With panels: rows [16 p, 16 p + 16) of tokens [0, n) of x into y[t · ldy + r] (+ bias).
    void panel_product(int64_t p, const q8_activations& x, int64_t n, const float* bias, float* y, int64_t ldy) const;

private:
    weight_format format_ = weight_format::f32;
    int64_t n_rows_ = 0, n_cols_ = 0;
    std::vector<float> f32_;                                     // [n_rows, n_cols]
    std::vector<uint16_t> f16_;                                  // [n_rows, n_cols] IEEE half bits
    std::vector<int8_t> q8_;                                     // [n_rows, n_cols]
    std::vector<uint8_t, huge_page_allocator<uint8_t>> panels_;  // q8 codes + 128 in panels of 16 rows, in place
                                                                 // of q8_ where AVX-512 VNNI takes them
    std::vector<float> scales_;                                  // [n_rows] q8: weight = scale · code
    std::vector<uint8_t, huge_page_allocator<uint8_t>> q4_;      // [n_rows, n_cols / 2] q4 codes (layout above)
    std::vector<float> group_scales_;  // [n_rows, n_cols / 32] q4: weight = scale · (code - 8)
};

// x[n] (n a multiple of 32) as int8 codes q[n] and one scale per block of 32, scales[n / 32].
void quantize_activations(const float* x, int64_t n, int8_t* q, float* scales);

// y[n, out] = x[n, in] · W^T + b (b may be null) over the context's workers (inline when small).
int32_t matmul(const troupe_parallel* parallel, const float* x, int64_t n, const packed_matrix& w, const float* b,
               float* y);

// One product of x with each of several matrices of the same n_cols (q, k, v of a layer; gate and up), y_i [n, out_i]
// = x · W_i^T: the activations quantized once and all the matrices' rows in one parallel region, each output equal to
// matmul's.
struct shared_input_product {
    const packed_matrix* w;
    float* y;
};
int32_t matmul_shared_input(const troupe_parallel* parallel, const float* x, int64_t n,
                            const shared_input_product* products, size_t n_products);
inline int32_t matmul_shared_input(const troupe_parallel* parallel, const float* x, int64_t n,
                                   std::initializer_list<shared_input_product> products) {
    return matmul_shared_input(parallel, x, n, products.begin(), products.size());
}

}  // namespace troupe::spec_common
