// Force-included into the AVX-512 kernel sources by -DTROUPE_EMULATE_AVX512=ON (kernels/CMakeLists.txt): their
// intrinsics become SIMDe's portable versions (libsimde-dev), so the AVX-512 level runs, slowly, on an AVX2-only
// CPU. A check of the kernels' arithmetic (the tests at every level), never a product build: see README.md here.
//
// SIMDe 0.7.4 (Debian 12) lacks some intrinsics the kernels use and aliases _mm512_madd_epi16 wrongly; those are
// written below element by element, following Intel's definitions (the reductions in GCC's order, which the kernels'
// results depend on). Add one here when a kernel starts using another: the compiler names it ("inlining failed in
// call to always_inline ... target specific option mismatch").
#pragma once
#include <immintrin.h>
#include <cstdint>
#include <cstring>
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define __AVX512F__ 1
#define __AVX512BW__ 1
#define __AVX512VL__ 1
#define __AVX512VNNI__ 1

static inline simde__m512 emu_cvtepi32_ps(simde__m512i a) {
    int32_t v[16];
    float r[16];
    std::memcpy(v, &a, 64);
    for (int i = 0; i < 16; ++i) r[i] = static_cast<float>(v[i]);
    simde__m512 o;
    std::memcpy(&o, r, 64);
    return o;
}
#define _mm512_cvtepi32_ps(a) emu_cvtepi32_ps(a)
// GCC's order: halves, then 128-bit halves, then (0+2, 1+3), then the two.
static inline float emu_reduce_add_ps(simde__m512 a) {
    float v[16];
    std::memcpy(v, &a, 64);
    float t[8], u[4], w[2];
    for (int i = 0; i < 8; ++i) t[i] = v[i + 8] + v[i];
    for (int i = 0; i < 4; ++i) u[i] = t[i + 4] + t[i];
    for (int i = 0; i < 2; ++i) w[i] = u[i] + u[i + 2];
    return w[0] + w[1];
}
#define _mm512_reduce_add_ps(a) emu_reduce_add_ps(a)
static inline simde__m512d emu_zextpd256_pd512(simde__m256d a) {
    double v[8] = {};
    std::memcpy(v, &a, 32);
    simde__m512d o;
    std::memcpy(&o, v, 64);
    return o;
}
#define _mm512_zextpd256_pd512(a) emu_zextpd256_pd512(a)

// Intrinsics SIMDe 0.7.4 lacks (or aliases wrongly), element by element.
#define EMU_ARR(T, n, name, v) \
    T name[n];                 \
    std::memcpy(name, &(v), sizeof name)
#define EMU_RET(V, arr)                   \
    do {                                  \
        V o_;                             \
        std::memcpy(&o_, arr, sizeof o_); \
        return o_;                        \
    } while (0)
static inline simde__m512i emu_madd_epi16(simde__m512i a, simde__m512i b) {
    EMU_ARR(int16_t, 32, x, a);
    EMU_ARR(int16_t, 32, y, b);
    int32_t r[16];
    for (int i = 0; i < 16; ++i) r[i] = int32_t(x[2 * i]) * y[2 * i] + int32_t(x[2 * i + 1]) * y[2 * i + 1];
    EMU_RET(simde__m512i, r);
}
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(...) emu_madd_epi16(__VA_ARGS__)
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps(...) emu_cvtepi32_ps(__VA_ARGS__)
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps(...) emu_reduce_add_ps(__VA_ARGS__)
static inline simde__m512 emu_shuffle_f32x4(simde__m512 a, simde__m512 b, int imm) {
    EMU_ARR(float, 16, x, a);
    EMU_ARR(float, 16, y, b);
    float r[16];
    for (int l = 0; l < 4; ++l) {
        const float* src = l < 2 ? x : y;
        const int sel = (imm >> (2 * l)) & 3;
        for (int i = 0; i < 4; ++i) r[4 * l + i] = src[4 * sel + i];
    }
    EMU_RET(simde__m512, r);
}
#define _mm512_shuffle_f32x4(...) emu_shuffle_f32x4(__VA_ARGS__)
static inline void emu_mask_storeu_ps(void* p, uint16_t k, simde__m512 a) {
    EMU_ARR(float, 16, x, a);
    for (int i = 0; i < 16; ++i)
        if (k >> i & 1) std::memcpy(static_cast<float*>(p) + i, &x[i], 4);
}
#define _mm512_mask_storeu_ps(...) emu_mask_storeu_ps(__VA_ARGS__)
static inline int emu_reduce_add_epi32(simde__m512i a) {
    EMU_ARR(int32_t, 16, x, a);
    uint32_t s = 0;
    for (int i = 0; i < 16; ++i) s += uint32_t(x[i]);
    return int(s);
}
#define _mm512_reduce_add_epi32(...) emu_reduce_add_epi32(__VA_ARGS__)
static inline simde__m512 emu_cvtph_ps(simde__m256i a) {
    EMU_ARR(uint16_t, 16, h, a);
    float r[16];
    for (int i = 0; i < 16; i += 8) {
        __m128i v;
        std::memcpy(&v, h + i, 16);
        __m256 f = _mm256_cvtph_ps(v);
        std::memcpy(r + i, &f, 32);
    }
    EMU_RET(simde__m512, r);
}
#define _mm512_cvtph_ps(...) emu_cvtph_ps(__VA_ARGS__)
static inline simde__m256i emu_cvtps_ph_rne(simde__m512 a) {
    EMU_ARR(float, 16, x, a);
    uint16_t r[16];
    for (int i = 0; i < 16; i += 8) {
        __m256 f;
        std::memcpy(&f, x + i, 32);
        __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        std::memcpy(r + i, &h, 16);
    }
    EMU_RET(simde__m256i, r);
}
#define _mm512_cvtps_ph(a, imm) emu_cvtps_ph_rne(a)  // the kernels round to nearest even only
static inline simde__m512i emu_cvtepi8_epi32(simde__m128i a) {
    EMU_ARR(int8_t, 16, x, a);
    int32_t r[16];
    for (int i = 0; i < 16; ++i) r[i] = x[i];
    EMU_RET(simde__m512i, r);
}
#define _mm512_cvtepi8_epi32(...) emu_cvtepi8_epi32(__VA_ARGS__)
static inline int emu_kortestz(uint16_t a, uint16_t b) {
    return (a | b) == 0;
}
#define _mm512_kortestz(...) emu_kortestz(__VA_ARGS__)
static inline simde__m512 emu_maskz_loadu_ps(uint16_t k, const void* p) {
    float r[16];
    for (int i = 0; i < 16; ++i) {
        r[i] = 0;
        if (k >> i & 1) std::memcpy(&r[i], static_cast<const float*>(p) + i, 4);
    }
    EMU_RET(simde__m512, r);
}
#define _mm512_maskz_loadu_ps(...) emu_maskz_loadu_ps(__VA_ARGS__)
static inline simde__m512 emu_mask_loadu_ps(simde__m512 s, uint16_t k, const void* p) {
    EMU_ARR(float, 16, r, s);
    for (int i = 0; i < 16; ++i)
        if (k >> i & 1) std::memcpy(&r[i], static_cast<const float*>(p) + i, 4);
    EMU_RET(simde__m512, r);
}
#define _mm512_mask_loadu_ps(...) emu_mask_loadu_ps(__VA_ARGS__)
static inline simde__m512 emu_permute_ps(simde__m512 a, int imm) {
    EMU_ARR(float, 16, x, a);
    float r[16];
    for (int l = 0; l < 4; ++l)
        for (int i = 0; i < 4; ++i) r[4 * l + i] = x[4 * l + ((imm >> (2 * i)) & 3)];
    EMU_RET(simde__m512, r);
}
#define _mm512_permute_ps(...) emu_permute_ps(__VA_ARGS__)
static inline void emu_mm_mask_storeu_ps(void* p, uint8_t k, simde__m128 a) {
    EMU_ARR(float, 4, x, a);
    for (int i = 0; i < 4; ++i)
        if (k >> i & 1) std::memcpy(static_cast<float*>(p) + i, &x[i], 4);
}
#define _mm_mask_storeu_ps(...) emu_mm_mask_storeu_ps(__VA_ARGS__)
static inline simde__m512i emu_mask_i32gather_epi32(simde__m512i src, uint16_t k, simde__m512i idx, const void* base,
                                                    int scale) {
    EMU_ARR(int32_t, 16, r, src);
    EMU_ARR(int32_t, 16, ix, idx);
    for (int i = 0; i < 16; ++i)
        if (k >> i & 1) std::memcpy(&r[i], static_cast<const char*>(base) + int64_t(ix[i]) * scale, 4);
    EMU_RET(simde__m512i, r);
}
#define _mm512_mask_i32gather_epi32(...) emu_mask_i32gather_epi32(__VA_ARGS__)
static inline simde__m256i emu_cvtepi32_epi16(simde__m512i a) {
    EMU_ARR(int32_t, 16, x, a);
    int16_t r[16];
    for (int i = 0; i < 16; ++i) r[i] = int16_t(x[i]);
    EMU_RET(simde__m256i, r);
}
#define _mm512_cvtepi32_epi16(...) emu_cvtepi32_epi16(__VA_ARGS__)
static inline simde__m128i emu_cvtepi32_epi8(simde__m512i a) {
    EMU_ARR(int32_t, 16, x, a);
    int8_t r[16];
    for (int i = 0; i < 16; ++i) r[i] = int8_t(x[i]);
    EMU_RET(simde__m128i, r);
}
#define _mm512_cvtepi32_epi8(...) emu_cvtepi32_epi8(__VA_ARGS__)
static inline simde__m512i emu_mask_srli_epi16(simde__m512i s, uint32_t k, simde__m512i a, unsigned n) {
    EMU_ARR(uint16_t, 32, r, s);
    EMU_ARR(uint16_t, 32, x, a);
    for (int i = 0; i < 32; ++i)
        if (k >> i & 1) r[i] = n > 15 ? 0 : uint16_t(x[i] >> n);
    EMU_RET(simde__m512i, r);
}
#define _mm512_mask_srli_epi16(...) emu_mask_srli_epi16(__VA_ARGS__)
static inline simde__m512i emu_cvtps_epi32(simde__m512 a) {
    EMU_ARR(float, 16, x, a);
    int32_t r[16];
    for (int i = 0; i < 16; i += 8) {
        __m256 f;
        std::memcpy(&f, x + i, 32);
        __m256i v = _mm256_cvtps_epi32(f);
        std::memcpy(r + i, &v, 32);
    }
    EMU_RET(simde__m512i, r);
}
#define _mm512_cvtps_epi32(...) emu_cvtps_epi32(__VA_ARGS__)
static inline float emu_reduce_max_ps(simde__m512 a) {
    EMU_ARR(float, 16, x, a);
    float t[8], u[4], w[2];
    for (int i = 0; i < 8; ++i) t[i] = x[i + 8] > x[i] ? x[i + 8] : x[i];
    for (int i = 0; i < 4; ++i) u[i] = t[i + 4] > t[i] ? t[i + 4] : t[i];
    for (int i = 0; i < 2; ++i) w[i] = u[i + 2] > u[i] ? u[i + 2] : u[i];
    return w[1] > w[0] ? w[1] : w[0];
}
#define _mm512_reduce_max_ps(...) emu_reduce_max_ps(__VA_ARGS__)
static inline simde__m512i emu_srai_epi32(simde__m512i a, unsigned n) {
    EMU_ARR(int32_t, 16, x, a);
    int32_t r[16];
    for (int i = 0; i < 16; ++i) r[i] = x[i] >> (n > 31 ? 31 : n);
    EMU_RET(simde__m512i, r);
}
#define _mm512_srai_epi32(...) emu_srai_epi32(__VA_ARGS__)
static inline simde__m256i emu_mm256_maskz_loadu_epi16(uint16_t k, const void* p) {
    int16_t r[16];
    for (int i = 0; i < 16; ++i) {
        r[i] = 0;
        if (k >> i & 1) std::memcpy(&r[i], static_cast<const int16_t*>(p) + i, 2);
    }
    EMU_RET(simde__m256i, r);
}
#define _mm256_maskz_loadu_epi16(...) emu_mm256_maskz_loadu_epi16(__VA_ARGS__)
static inline simde__m512i emu_shuffle_i64x2(simde__m512i a, simde__m512i b, int imm) {
    EMU_ARR(int64_t, 8, x, a);
    EMU_ARR(int64_t, 8, y, b);
    int64_t r[8];
    for (int l = 0; l < 4; ++l) {
        const int64_t* s = l < 2 ? x : y;
        const int sel = (imm >> (2 * l)) & 3;
        r[2 * l] = s[2 * sel];
        r[2 * l + 1] = s[2 * sel + 1];
    }
    EMU_RET(simde__m512i, r);
}
#define _mm512_shuffle_i64x2(...) emu_shuffle_i64x2(__VA_ARGS__)
static inline simde__m512i emu_shuffle_epi32(simde__m512i a, int imm) {
    EMU_ARR(int32_t, 16, x, a);
    int32_t r[16];
    for (int l = 0; l < 4; ++l)
        for (int i = 0; i < 4; ++i) r[4 * l + i] = x[4 * l + ((imm >> (2 * i)) & 3)];
    EMU_RET(simde__m512i, r);
}
#define _mm512_shuffle_epi32(a, imm) emu_shuffle_epi32(a, static_cast<int>(imm))
static inline uint16_t emu_mask_cmp_ps_mask(uint16_t k, simde__m512 a, simde__m512 b, int pred) {
    EMU_ARR(float, 16, x, a);
    EMU_ARR(float, 16, y, b);
    uint16_t r = 0;
    for (int i = 0; i < 16; ++i) {
        bool c;
        switch (pred) {
            case _CMP_EQ_OQ:
                c = x[i] == y[i];
                break;
            case _CMP_GT_OQ:
                c = x[i] > y[i];
                break;
            case _CMP_LE_OQ:
                c = x[i] <= y[i];
                break;
            case _CMP_ORD_Q:
                c = x[i] == x[i] && y[i] == y[i];
                break;
            default:
                __builtin_trap();
        }
        if (c && (k >> i & 1)) r |= uint16_t(1u << i);
    }
    return r;
}
#define _mm512_mask_cmp_ps_mask(...) emu_mask_cmp_ps_mask(__VA_ARGS__)
#undef _mm512_cmp_ps_mask
#define _mm512_cmp_ps_mask(a, b, p) emu_mask_cmp_ps_mask(0xffff, a, b, p)
static inline simde__m512i emu_cvtepu16_epi32(simde__m256i a) {
    EMU_ARR(uint16_t, 16, x, a);
    int32_t r[16];
    for (int i = 0; i < 16; ++i) r[i] = x[i];
    EMU_RET(simde__m512i, r);
}
#define _mm512_cvtepu16_epi32(...) emu_cvtepu16_epi32(__VA_ARGS__)
#include <cmath>
static inline simde__m512 emu_fmaddsub_ps(simde__m512 a, simde__m512 b, simde__m512 c) {
    EMU_ARR(float, 16, x, a);
    EMU_ARR(float, 16, y, b);
    EMU_ARR(float, 16, z, c);
    float r[16];
    for (int i = 0; i < 16; ++i) r[i] = std::fma(x[i], y[i], (i & 1) ? z[i] : -z[i]);
    EMU_RET(simde__m512, r);
}
#define _mm512_fmaddsub_ps(...) emu_fmaddsub_ps(__VA_ARGS__)
static inline simde__m512i emu_cvtepu8_epi32(simde__m128i a) {
    EMU_ARR(uint8_t, 16, x, a);
    int32_t r[16];
    for (int i = 0; i < 16; ++i) r[i] = x[i];
    EMU_RET(simde__m512i, r);
}
#define _mm512_cvtepu8_epi32(...) emu_cvtepu8_epi32(__VA_ARGS__)
