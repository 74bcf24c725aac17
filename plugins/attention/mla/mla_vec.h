// The vector primitives of the MLA kernels (mla_absorbed.cpp, mla_naive.cpp): dot products, y += a x, scaling, the
// latent cache's row conversions (float32 or IEEE halves), and products with attn_kv_b's rows in their stored type. One
// table per instruction set, each built in its own file with that set's flags (mla_vec_scalar.cpp, mla_vec_avx2.cpp);
// the paths call through the table, so no code built with AVX flags is ever shared with the code other CPUs run.
#pragma once

#include <cstdint>

namespace troupe::mla {

// How attn_kv_b's rows are stored where the kernels read them (mla_model.h): float32, IEEE halves or bfloat16.
enum class weight_type { f32, f16, bf16 };

struct vec_ops {
    const char* name;  // "scalar", "avx2"
    // Σ a[i] b[i]
    float (*dot)(const float* a, const float* b, int64_t n);
    // out[i] = Σ_j rows[i * stride + j] x[j] for i < n_rows: a row-major matrix times a vector (the rows read once,
    // x kept in registers or L1 across them)
    void (*gemv)(const float* rows, int64_t stride, int64_t n_rows, const float* x, int64_t n, float* out);
    // y[i] += a x[i]
    void (*axpy)(float* y, float a, const float* x, int64_t n);
    // y[i] += Σ_j w[j] rows[j * stride + i] for j < n_rows <= 16: several axpys with y loaded and stored once
    void (*axpy_rows)(float* y, const float* w, const float* rows, int64_t stride, int64_t n_rows, int64_t n);
    // y[i] *= a
    void (*scale)(float* y, float a, int64_t n);
    // dst[i] = src[i] as float: src float32, or halves (f16)
    void (*load)(const void* src, bool f16, float* dst, int64_t n);
    // dst[i] = src[i] as float32 or as halves rounded to nearest even (f16)
    void (*store)(const float* src, bool f16, void* dst, int64_t n);
    // The same three on weight rows of `type`, each element converted to float in registers as it is read:
    // gemv as above, y[i] += a x[i], and dst[i] = src[i] as float (a few rows into a small scratch)
    void (*gemv_w)(const void* rows, weight_type type, int64_t stride, int64_t n_rows, const float* x, int64_t n,
                   float* out);
    void (*axpy_w)(float* y, float a, const void* x, weight_type type, int64_t n);
    void (*load_w)(const void* src, weight_type type, float* dst, int64_t n);
};

const vec_ops& scalar_vec_ops();
const vec_ops& avx2_vec_ops();  // call only where the CPU has AVX2, FMA and F16C

}  // namespace troupe::mla
