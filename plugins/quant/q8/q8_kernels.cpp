#include "q8_kernels.h"

#include <cmath>
#include <vector>

#include "kernels/fp16.h"

#if TROUPE_Q8_WITH_KERNELS
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q8_panels.h"
#endif

namespace troupe::q8 {

void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n) {
    for (int64_t b = 0; b < n / qk8_0; ++b) {
        const float* xb = x + b * qk8_0;
        float amax = 0.0f;
        for (int i = 0; i < qk8_0; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        for (int i = 0; i < qk8_0; ++i) y[b].qs[i] = static_cast<int8_t>(std::round(xb[i] * id));
    }
}

void quantize_rows(ggml_type type, const void* src, size_t row_stride, int64_t n_in, int64_t n_in_padded,
                   block_q8_0* dst, int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(n_in_padded), 0.0f);  // zeros past n_in
    const int64_t n_blocks = n_in_padded / qk8_0;
    for (int64_t r = begin; r < end; ++r) {
        const auto* bytes = static_cast<const uint8_t*>(src) + static_cast<size_t>(r) * row_stride;
        if (type == ggml_type::f16) {
            const auto* h = reinterpret_cast<const uint16_t*>(bytes);
            for (int64_t i = 0; i < n_in; ++i) row[i] = fp16_to_fp32(h[i]);
        } else if (type == ggml_type::bf16) {
            const auto* h = reinterpret_cast<const uint16_t*>(bytes);
            for (int64_t i = 0; i < n_in; ++i) row[i] = bf16_to_fp32(h[i]);
        } else {  // f32, checked by the caller
            const auto* f = reinterpret_cast<const float*>(bytes);
            for (int64_t i = 0; i < n_in; ++i) row[i] = f[i];
        }
        quantize_row_q8_0(row.data(), dst + r * n_blocks, n_in_padded);
    }
}

#if TROUPE_Q8_WITH_KERNELS

namespace {

cpu::activation_recipe kernel_recipe(activations recipe) {
    return recipe == activations::float32 ? cpu::activation_recipe::float32 : cpu::activation_recipe::quantized;
}

}  // namespace

size_t panel_bytes(int64_t n_in, int64_t n_out, activations recipe) {
    if (!cpu::q8_panels_supported(ggml_type::q8_0, kernel_recipe(recipe))) return 0;
    return cpu::q8_panels_bytes(matmul_weight{ggml_type::q8_0, nullptr, n_in, n_out, row_bytes(ggml_type::q8_0, n_in)});
}

void pack_panels(const block_q8_0* w, int64_t n_in, int64_t n_out, size_t row_stride, void* dst) {
    cpu::pack_q8_panels(matmul_weight{ggml_type::q8_0, w, n_in, n_out, row_stride}, dst, nullptr);
}

void matmul(const block_q8_0* w, const void* panels, int64_t n_in, int64_t n_out, size_t row_stride, const float* x,
            float* y, int64_t n_tokens, const parallel_fn& parallel_for, activations recipe) {
    matmul_weight mw{ggml_type::q8_0, w, n_in, n_out, row_stride};
    mw.panels = panels;
    cpu::matmul(mw, x, y, n_tokens, parallel_for, kernel_recipe(recipe));
}

const char* matmul_implementation() {
    return "troupe_kernels";
}

#else

namespace {

const block_q8_0* row_of(const block_q8_0* w, size_t row_stride, int64_t o) {
    return reinterpret_cast<const block_q8_0*>(reinterpret_cast<const uint8_t*>(w) +
                                               static_cast<size_t>(o) * row_stride);
}

// W8A16: each row dequantized (d * q, exact), dotted with the float activations.
void matmul_float(const block_q8_0* w, int64_t n_in, int64_t n_out, size_t row_stride, const float* x, float* y,
                  int64_t n_tokens, const parallel_fn& parallel_for) {
    parallel_for(n_out, [&](int64_t begin, int64_t end) {
        std::vector<float> row(static_cast<size_t>(n_in));  // [n_in] one dequantized weight row
        for (int64_t o = begin; o < end; ++o) {
            const block_q8_0* wr = row_of(w, row_stride, o);
            for (int64_t b = 0; b < n_in / qk8_0; ++b) {
                const float d = fp16_to_fp32(wr[b].d);
                for (int i = 0; i < qk8_0; ++i) row[b * qk8_0 + i] = wr[b].qs[i] * d;
            }
            for (int64_t t = 0; t < n_tokens; ++t) {
                const float* xt = x + t * n_in;
                float sum = 0.0f;
                for (int64_t i = 0; i < n_in; ++i) sum += row[i] * xt[i];
                y[t * n_out + o] = sum;
            }
        }
    });
}

}  // namespace

size_t panel_bytes(int64_t, int64_t, activations) {
    return 0;
}

void pack_panels(const block_q8_0*, int64_t, int64_t, size_t, void*) {}

void matmul(const block_q8_0* w, const void*, int64_t n_in, int64_t n_out, size_t row_stride, const float* x, float* y,
            int64_t n_tokens, const parallel_fn& parallel_for, activations recipe) {
    if (recipe == activations::float32) return matmul_float(w, n_in, n_out, row_stride, x, y, n_tokens, parallel_for);
    const int64_t n_blocks = n_in / qk8_0;
    std::vector<block_q8_0> xq(static_cast<size_t>(n_tokens * n_blocks));  // [n_tokens, n_blocks]
    for (int64_t t = 0; t < n_tokens; ++t) quantize_row_q8_0(x + t * n_in, xq.data() + t * n_blocks, n_in);
    parallel_for(n_out, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
            const block_q8_0* wr = row_of(w, row_stride, o);
            for (int64_t t = 0; t < n_tokens; ++t) {
                const block_q8_0* xr = xq.data() + t * n_blocks;
                float sum = 0.0f;
                for (int64_t b = 0; b < n_blocks; ++b) {
                    int32_t isum = 0;
                    for (int i = 0; i < qk8_0; ++i) isum += int32_t{wr[b].qs[i]} * int32_t{xr[b].qs[i]};
                    sum += static_cast<float>(isum) * (fp16_to_fp32(wr[b].d) * fp16_to_fp32(xr[b].d));
                }
                y[t * n_out + o] = sum;
            }
        }
    });
}

const char* matmul_implementation() {
    return "scalar";
}

#endif

}  // namespace troupe::q8
