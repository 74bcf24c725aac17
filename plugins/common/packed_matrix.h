// packed_matrix: a float32 weight matrix kept as float32, half floats or 8-bit rows for the speculative heads'
// products. Drafting reads the whole layer for a handful of rows per call, so it is bound by the bytes of its
// weights; half floats halve them, 8-bit rows (one float scale per row, round to nearest, codes -127..127) quarter
// them. With 8-bit rows whose length is a multiple of 32, the activations are quantized too (blocks of 32, one
// scale each, as llama.cpp's Q8_0 activations) and the products are integer ones, half the instructions of
// widening each weight to float; where the CPU has AVX-512 VNNI and the rows are whole 64s, the codes are kept
// offset to unsigned (w + 128) for one vpdpbusd per 64 of them (~2x the AVX2 products). A draft only proposes (the
// target verifies every token), so its precision changes acceptance, never output.
//
//   y[n, out] = x[n, in] · W^T (+ b)       W: [out][in] in the chosen format; x, y, b float32
#pragma once

#include <troupe/plugin.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

namespace troupe::spec_common {

enum class weight_format { f32, f16, q8 };

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

// "f32", "f16", "q8".
const char* weight_format_name(weight_format f);
// The format named "f32", "f16" or "q8" (a name param_reader::choice checked).
weight_format weight_format_of(const std::string& name);

// Activations [n, in] (in a multiple of 32) as int8 codes in blocks of 32 for integer products with q8 rows.
struct q8_activations {
    std::vector<int8_t> codes;       // [n, in]
    std::vector<float> scales;       // [n, in / 32] one per block
    std::vector<float> lane_scales;  // [n, in / 4] each block's scale repeated over its 8 lanes of four (VNNI)
    std::vector<float> offset;       // [n] 128 · Σ_b scale_b · Σ codes of block b: what unsigned weight codes add
    void set(const float* x, int64_t n, int64_t in);
};

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
    // q8 with n_cols a multiple of 32: the same with row x_row of quantized activations (integer products).
    float row_dot_q8(int64_t r, const q8_activations& x, int64_t x_row) const;

private:
    weight_format format_ = weight_format::f32;
    int64_t n_rows_ = 0, n_cols_ = 0;
    std::vector<float> f32_;                                 // [n_rows, n_cols]
    std::vector<uint16_t> f16_;                              // [n_rows, n_cols] IEEE half bits
    std::vector<int8_t> q8_;                                 // [n_rows, n_cols]
    std::vector<uint8_t, huge_page_allocator<uint8_t>> u8_;  // [n_rows, n_cols] q8 codes + 128, in place of q8_
                                                             // where AVX-512 VNNI takes rows
                                                             // of whole 64s (one dpbusd per 64 codes)
    std::vector<float> scales_;                              // [n_rows] q8: weight = scale · code
};

// x[n] (n a multiple of 32) as int8 codes q[n] and one scale per block of 32, scales[n / 32].
void quantize_activations(const float* x, int64_t n, int8_t* q, float* scales);

// y[n, out] = x[n, in] · W^T + b (b may be null) over the context's workers (inline when small).
int32_t matmul(const troupe_parallel* parallel, const float* x, int64_t n, const packed_matrix& w, const float* b,
               float* y);

}  // namespace troupe::spec_common
