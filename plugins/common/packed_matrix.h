// packed_matrix: a float32 weight matrix kept as float32, half floats or 8-bit rows for the speculative heads'
// products. Drafting reads the whole layer for a handful of rows per call, so it is bound by the bytes of its
// weights; half floats halve them, 8-bit rows (one float scale per row, round to nearest, codes -127..127) quarter
// them. A draft only proposes (the target verifies every token), so its precision changes acceptance, never output.
//
//   y[n, out] = x[n, in] · W^T (+ b)       W: [out][in] in the chosen format; x, y, b float32
#pragma once

#include <troupe/plugin.h>

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::spec_common {

enum class weight_format { f32, f16, q8 };

// "f32", "f16", "q8".
const char* weight_format_name(weight_format f);
// The format named "f32", "f16" or "q8" (a name param_reader::choice checked).
weight_format weight_format_of(const std::string& name);

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

private:
    weight_format format_ = weight_format::f32;
    int64_t n_rows_ = 0, n_cols_ = 0;
    std::vector<float> f32_;     // [n_rows, n_cols]
    std::vector<uint16_t> f16_;  // [n_rows, n_cols] IEEE half bits
    std::vector<int8_t> q8_;     // [n_rows, n_cols]
    std::vector<float> scales_;  // [n_rows] q8: weight = scale · code
};

// y[n, out] = x[n, in] · W^T + b (b may be null) over the context's workers (inline when small).
int32_t matmul(const troupe_parallel* parallel, const float* x, int64_t n, const packed_matrix& w, const float* b,
               float* y);

}  // namespace troupe::spec_common
