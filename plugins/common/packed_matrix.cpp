#include "plugins/common/packed_matrix.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <span>
#include <string>

#include "plugins/common/dense_ops.h"
#include "plugins/common/half.h"
#include "plugins/common/plugin_support.h"
#include "plugins/common/prefetch.h"
#include "plugins/common/q4_rows.h"
#include "plugins/common/q8_row_panels.h"

namespace troupe::spec_common {
namespace {

float dot_f16_scalar(const uint16_t* w, const float* x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += quant_common::fp16_to_fp32(w[i]) * x[i];
    return s;
}

float dot_q8_scalar(const int8_t* w, const float* x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<float>(w[i]) * x[i];
    return s;
}

__attribute__((target("avx2,fma,f16c"))) float hsum(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
    return _mm_cvtss_f32(s4);
}

__attribute__((target("avx2,fma,f16c"))) float dot_f16_avx2(const uint16_t* w, const float* x, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
        const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i + 8)));
        acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), acc0);
        acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), acc1);
    }
    float s = hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; ++i) s += quant_common::fp16_to_fp32(w[i]) * x[i];
    return s;
}

__attribute__((target("avx2,fma,f16c"))) float dot_q8_avx2(const int8_t* w, const float* x, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i));
        const __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
        const __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)));
        acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), acc0);
        acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), acc1);
    }
    float s = hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; ++i) s += static_cast<float>(w[i]) * x[i];
    return s;
}

// Σ over blocks of 32: (Σ w·x codes) · the block's activation scale; the row's weight scale is applied by the caller.
float dot_q8q8_scalar(const int8_t* w, const int8_t* x, const float* x_scales, int64_t n_blocks) {
    float s = 0;
    for (int64_t b = 0; b < n_blocks; ++b) {
        int32_t acc = 0;
        for (int j = 0; j < 32; ++j) acc += static_cast<int32_t>(w[b * 32 + j]) * x[b * 32 + j];
        s += static_cast<float>(acc) * x_scales[b];
    }
    return s;
}

// Byte products by maddubs (unsigned |w| times x with w's sign), pairs summed to 32 bits, scaled per block.
__attribute__((target("avx2,fma,f16c"))) float dot_q8q8_avx2(const int8_t* w, const int8_t* x, const float* x_scales,
                                                             int64_t n_blocks) {
    __m256 acc = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < n_blocks; ++b) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + b * 32));
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + b * 32));
        const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
        const __m256i p32 = _mm256_madd_epi16(p16, ones);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(x_scales[b]), acc);
    }
    return hsum(acc);
}

}  // namespace

template <class T>
T* huge_page_allocator<T>::allocate(size_t n) {
    constexpr size_t huge = size_t{2} << 20;
    const size_t bytes = n * sizeof(T);
    const size_t align = bytes >= huge ? huge : 64;
    void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
    if (p == nullptr) throw std::bad_alloc();
    if (align == huge) (void)madvise(p, (bytes + align - 1) / align * align, MADV_HUGEPAGE);
    return static_cast<T*>(p);
}
template struct huge_page_allocator<uint8_t>;

namespace {

bool has_vnni() {
    static const bool yes = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vnni");
    }();
    return yes;
}

bool has_avx2() {
    static const bool yes = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    }();
    return yes;
}

}  // namespace

const char* weight_format_name(weight_format f) {
    switch (f) {
        case weight_format::f32:
            return "f32";
        case weight_format::f16:
            return "f16";
        case weight_format::q8:
            return "q8";
        case weight_format::q4:
            return "q4";
    }
    return "?";
}

weight_format weight_format_of(const std::string& name) {
    if (name == "f16") return weight_format::f16;
    if (name == "q8") return weight_format::q8;
    if (name == "q4") return weight_format::q4;
    return weight_format::f32;
}

packed_matrix::packed_matrix(const float* w, int64_t n_rows, int64_t n_cols, weight_format format)
    : format_(format == weight_format::q4 && n_cols % 32 != 0 ? weight_format::q8 : format),
      n_rows_(n_rows),
      n_cols_(n_cols) {
    const auto count = static_cast<size_t>(n_rows * n_cols);
    switch (format_) {
        case weight_format::q4: {
            q4_.assign(count / 2, 0);
            group_scales_.resize(count / 32);
            for (int64_t r = 0; r < n_rows; ++r) {
                const float* row = w + r * n_cols;
                uint8_t* codes = q4_.data() + r * n_cols / 2;
                for (int64_t g = 0; g < n_cols / 32; ++g) {
                    int8_t steps[32];
                    const float d = q4_rows::fit_group(row + 32 * g, steps);
                    group_scales_[static_cast<size_t>(r * (n_cols / 32) + g)] = d;
                    for (int64_t j = 32 * g; j < 32 * g + 32; ++j) {
                        const auto q = static_cast<uint8_t>(steps[j - 32 * g] + 8);
                        const int64_t c = j / 128, k = j % 128, half = std::min<int64_t>(128, n_cols - 128 * c) / 2;
                        uint8_t& byte = codes[64 * c + (k < half ? k : k - half)];
                        byte = static_cast<uint8_t>(k < half ? (byte & 0xf0) | q : (byte & 0x0f) | (q << 4));
                    }
                }
            }
            return;
        }
        case weight_format::f32:
            f32_.assign(w, w + count);
            return;
        case weight_format::f16:
            f16_.resize(count);
            for (size_t i = 0; i < count; ++i) f16_[i] = quant_common::fp32_to_fp16(w[i]);
            return;
        case weight_format::q8:
            q8_.resize(count);
            scales_.resize(static_cast<size_t>(n_rows));
            for (int64_t r = 0; r < n_rows; ++r) {
                const float* row = w + r * n_cols;
                float amax = 0;
                for (int64_t i = 0; i < n_cols; ++i) amax = std::max(amax, std::fabs(row[i]));
                const float scale = amax / 127.0f;
                const float inv = scale > 0 ? 1.0f / scale : 0.0f;
                scales_[static_cast<size_t>(r)] = scale;
                for (int64_t i = 0; i < n_cols; ++i)
                    q8_[static_cast<size_t>(r * n_cols + i)] = static_cast<int8_t>(std::lrint(row[i] * inv));
            }
            if (has_vnni() && n_cols % 32 == 0) {  // the VNNI panels replace the signed rows
                panels_.resize(q8_row_panels::n_panels(n_rows) * q8_row_panels::panel_bytes(n_cols));
                q8_row_panels::pack(q8_.data(), n_rows, n_cols, panels_.data());
                q8_.clear();
                q8_.shrink_to_fit();
            }
            return;
    }
}

size_t packed_matrix::n_bytes() const {
    return f32_.size() * 4 + f16_.size() * 2 + q8_.size() + panels_.size() + scales_.size() * 4 + q4_.size() +
           group_scales_.size() * 4;
}

float packed_matrix::weight(int64_t r, int64_t i) const {
    switch (format_) {
        case weight_format::f32:
            return f32_[static_cast<size_t>(r * n_cols_ + i)];
        case weight_format::f16:
            return quant_common::fp16_to_fp32(f16_[static_cast<size_t>(r * n_cols_ + i)]);
        case weight_format::q8: {
            const int32_t code = panels_.empty() ? q8_[static_cast<size_t>(r * n_cols_ + i)]
                                                 : q8_row_panels::code(panels_.data(), n_cols_, r, i);
            return static_cast<float>(code) * scales_[static_cast<size_t>(r)];
        }
        case weight_format::q4:
            return group_scales_[static_cast<size_t>(r * (n_cols_ / 32) + i / 32)] *
                   static_cast<float>(q4_rows::code(q4_.data() + r * n_cols_ / 2, n_cols_, i) - 8);
    }
    return 0.0f;
}

float packed_matrix::row_dot(int64_t r, const float* x) const {
    switch (format_) {
        case weight_format::f32:
            return dot(f32_.data() + r * n_cols_, x, n_cols_);
        case weight_format::f16: {
            const uint16_t* w = f16_.data() + r * n_cols_;
            return has_avx2() ? dot_f16_avx2(w, x, n_cols_) : dot_f16_scalar(w, x, n_cols_);
        }
        case weight_format::q8: {
            if (!panels_.empty()) {
                float s = 0;
                for (int64_t i = 0; i < n_cols_; ++i)
                    s += static_cast<float>(q8_row_panels::code(panels_.data(), n_cols_, r, i)) * x[i];
                return s * scales_[static_cast<size_t>(r)];
            }
            const int8_t* w = q8_.data() + r * n_cols_;
            const float s = has_avx2() ? dot_q8_avx2(w, x, n_cols_) : dot_q8_scalar(w, x, n_cols_);
            return s * scales_[static_cast<size_t>(r)];
        }
        case weight_format::q4: {
            float s = 0;
            for (int64_t i = 0; i < n_cols_; ++i) s += weight(r, i) * x[i];
            return s;
        }
    }
    return 0.0f;
}

float packed_matrix::row_dot_q8(int64_t r, const q8_activations& x, int64_t x_row) const {
    if (format_ == weight_format::q4) {
        static const q4_kernel best = q4_best_kernel();
        return row_dot_q4(r, x, x_row, best);
    }
    const int8_t* xq = x.codes.data() + x_row * n_cols_;
    if (!panels_.empty()) {  // the row's lane of its panel's product with this one token
        const int64_t p = r / q8_row_panels::k_rows;
        float y[q8_row_panels::k_rows];
        q8_row_panels::product(
            panels_.data(), n_cols_, p, static_cast<int>(std::min<int64_t>(q8_row_panels::k_rows, n_rows_ - p * 16)),
            xq, x.scales.data() + x_row * (n_cols_ / 32), x.offset.data() + x_row, 1, scales_.data(), nullptr, y, 0);
        return y[r % q8_row_panels::k_rows];
    }
    const int8_t* w = q8_.data() + r * n_cols_;
    const int64_t n_blocks = n_cols_ / 32;
    const float* xs = x.scales.data() + x_row * n_blocks;
    const float s = has_avx2() ? dot_q8q8_avx2(w, xq, xs, n_blocks) : dot_q8q8_scalar(w, xq, xs, n_blocks);
    return s * scales_[static_cast<size_t>(r)];
}

void q8_activations::set(const float* x, int64_t n, int64_t in) {
    codes.resize(static_cast<size_t>(n * in));
    scales.resize(static_cast<size_t>(n * in / 32));
    lane_scales.resize(static_cast<size_t>(n * in / 4));
    offset.assign(static_cast<size_t>(n), 0.0f);
    block_sums.resize(static_cast<size_t>(n * in / 32));
    for (int64_t r = 0; r < n; ++r) {
        int8_t* q = codes.data() + r * in;
        float* d = scales.data() + r * (in / 32);
        quantize_activations(x + r * in, in, q, d);
        double off = 0;
        for (int64_t b = 0; b < in / 32; ++b) {
            int32_t sum = 0;
            for (int j = 0; j < 32; ++j) sum += q[b * 32 + j];
            off += 128.0 * sum * d[b];
            block_sums[static_cast<size_t>(r * (in / 32) + b)] = d[b] * static_cast<float>(sum);
            std::fill_n(lane_scales.data() + r * (in / 4) + b * 8, 8, d[b]);
        }
        offset[static_cast<size_t>(r)] = static_cast<float>(off);
    }
}

void packed_matrix::panel_product(int64_t p, const q8_activations& x, int64_t n, const float* bias, float* y,
                                  int64_t ldy) const {
    const auto n_valid =
        static_cast<int>(std::min<int64_t>(q8_row_panels::k_rows, n_rows_ - p * q8_row_panels::k_rows));
    q8_row_panels::product(panels_.data(), n_cols_, p, n_valid, x.codes.data(), x.scales.data(), x.offset.data(), n,
                           scales_.data(), bias, y + p * q8_row_panels::k_rows, ldy);
}

q4_kernel q4_best_kernel() {
    return has_vnni() ? q4_kernel::vnni : has_avx2() ? q4_kernel::avx2 : q4_kernel::scalar;
}

float packed_matrix::row_dot_q4(int64_t r, const q8_activations& x, int64_t x_row, q4_kernel k) const {
    const int64_t n = n_cols_;
    const uint8_t* codes = q4_.data() + r * n / 2;
    const float* group_scales = group_scales_.data() + r * (n / 32);
    const int8_t* xq = x.codes.data() + x_row * n;
    const float* xs = x.scales.data() + x_row * (n / 32);
    const float* bs = x.block_sums.data() + x_row * (n / 32);
    switch (k) {
        case q4_kernel::vnni:
            return q4_rows::dot_vnni(codes, group_scales, n, xq, xs, x.lane_scales.data() + x_row * (n / 4), bs);
        case q4_kernel::avx2:
            return q4_rows::dot_avx2(codes, group_scales, n, xq, xs, bs);
        case q4_kernel::scalar:
            break;
    }
    return q4_rows::dot_scalar(codes, group_scales, n, xq, xs);
}

void quantize_activations(const float* x, int64_t n, int8_t* q, float* scales) {
    for (int64_t b = 0; b < n / 32; ++b) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
        const float d = amax / 127.0f;
        const float inv = d > 0 ? 1.0f / d : 0.0f;
        scales[b] = d;
        for (int j = 0; j < 32; ++j) q[b * 32 + j] = static_cast<int8_t>(std::lrint(x[b * 32 + j] * inv));
    }
}

// Below this many multiply-adds an integer product stays on the calling thread: 256K, with or without VNNI. The
// drafters' matrices are read from memory each step (the target's weights stream through the caches in between), so
// a product is bound by the thread's share of the bandwidth, not by its arithmetic: on a 2-core first-generation EPYC
// (AVX2) the grown 110M's EAGLE propose 3.3 -> 2.2-2.4 ms a step and Medusa's 0.47 -> 0.32 when they split from 256K
// instead of 4M (1M: 2.6 ms, 64K: as 256K); on a 2-core Zen 4 with VNNI (troupe bench --spec eagle|medusa on the
// grown 110M, three alternated rounds) EAGLE's propose 1.54-1.58 -> 1.11-1.21 ms and Medusa's 0.23-0.25 ->
// 0.17-0.20 ms, where the 4M threshold had kept them inline as cheap to compute.
constexpr int64_t integer_inline_below = int64_t{1} << 18;

int32_t matmul_shared_input(const troupe_parallel* parallel, const float* x, int64_t n,
                            const shared_input_product* first, size_t n_products) {
    const std::span<const shared_input_product> products(first, n_products);
    const auto integer_format = [](const packed_matrix& w) {
        return (w.format() == weight_format::q8 || w.format() == weight_format::q4) && w.n_cols() % 32 == 0;
    };
    bool together = true;
    int64_t out = 0;
    const int64_t in = products.empty() ? 0 : products.front().w->n_cols();
    for (const shared_input_product& p : products) {
        together = together && integer_format(*p.w) && p.w->n_cols() == in;
        out += p.w->n_rows();
    }
    if (!together) {  // float rows: one product each
        for (const shared_input_product& p : products) {
            if (int32_t rc = matmul(parallel, x, n, *p.w, nullptr, p.y); rc != TROUPE_OK) return rc;
        }
        return TROUPE_OK;
    }
    if (n <= 0 || out <= 0) return TROUPE_OK;
    thread_local q8_activations caller_codes;
    q8_activations& xq = caller_codes;
    xq.set(x, n, in);
    if (std::all_of(products.begin(), products.end(),
                    [](const shared_input_product& p) { return p.w->has_panels(); })) {
        int64_t panels = 0;
        for (const shared_input_product& p : products) panels += q8_row_panels::n_panels(p.w->n_rows());
        return for_each_output(
            parallel, n, in * q8_row_panels::k_rows, panels,
            [&](int64_t i) {
                for (const shared_input_product& p : products) {
                    const int64_t np = q8_row_panels::n_panels(p.w->n_rows());
                    if (i < np) return p.w->panel_product(i, xq, n, nullptr, p.y, p.w->n_rows());
                    i -= np;
                }
            },
            integer_inline_below);
    }
    return for_each_output(
        parallel, n, in, out,
        [&](int64_t o) {
            for (const shared_input_product& p : products) {
                if (o < p.w->n_rows()) {
                    for (int64_t r = 0; r < n; ++r) p.y[r * p.w->n_rows() + o] = p.w->row_dot_q8(o, xq, r);
                    return;
                }
                o -= p.w->n_rows();
            }
        },
        integer_inline_below);
}

int32_t matmul(const troupe_parallel* parallel, const float* x, int64_t n, const packed_matrix& w, const float* b,
               float* y) {
    const int64_t in = w.n_cols(), out = w.n_rows();
    if (n <= 0 || out <= 0) return TROUPE_OK;
    // q8 weights with rows of whole blocks: the activations too, in blocks of 32 (integer products).
    const bool integer = (w.format() == weight_format::q8 || w.format() == weight_format::q4) && in % 32 == 0;
    thread_local q8_activations caller_codes;  // reused between calls; workers read the caller's through xq
    q8_activations& xq = caller_codes;
    if (integer) xq.set(x, n, in);
    if (w.has_panels()) {  // a piece is a panel of 16 rows
        return for_each_output(
            parallel, n, in * q8_row_panels::k_rows, q8_row_panels::n_panels(out),
            [&](int64_t p) { w.panel_product(p, xq, n, b, y, out); }, integer_inline_below);
    }
    return for_each_output(
        parallel, n, in, out,
        [&](int64_t o) {
            const float bias = b != nullptr ? b[o] : 0.0f;
            for (int64_t r = 0; r < n; ++r) {
                y[r * out + o] = (integer ? w.row_dot_q8(o, xq, r) : w.row_dot(o, x + r * in)) + bias;
            }
        },
        integer ? integer_inline_below : int64_t{1} << 20);
}

}  // namespace troupe::spec_common
