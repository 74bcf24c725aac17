// The panel form's quantizer, the products' driver (token tiles, k blocks, threads) and the scalar kernel, the twin
// the SIMD kernels are tested against (fp8_panels.h).
#include "fp8_panels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

namespace troupe::fp8_panels {
namespace {

float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return fp8::bits_float(sign | 0x7f800000u | (m << 13));  // inf / NaN
    if (e == 0) return fp8::bits_float(sign | fp8::float_bits(static_cast<float>(m) * fp8::pow2(-24)));
    return fp8::bits_float(sign | ((e + 112) << 23) | (m << 13));
}

float bf16_to_float(uint16_t h) {
    return fp8::bits_float(static_cast<uint32_t>(h) << 16);
}

// decode(code) for every code of a format.
const std::array<float, 256>& decode_table(fp8::format f) {
    static const auto make = [](fp8::format fmt) {
        std::array<float, 256> t{};
        for (int c = 0; c < 256; ++c) t[c] = fp8::decode(static_cast<uint8_t>(c), fmt);
        return t;
    };
    static const std::array<float, 256> e4m3 = make(fp8::format::e4m3);
    static const std::array<float, 256> e5m2 = make(fp8::format::e5m2);
    return f == fp8::format::e4m3 ? e4m3 : e5m2;
}

}  // namespace

const char* name(kernel k) {
    switch (k) {
        case kernel::scalar:
            return "scalar";
        case kernel::avx2:
            return "avx2";
        case kernel::avx512:
            return "avx512";
    }
    return "?";
}

bool cpu_has(kernel k) {
    switch (k) {
        case kernel::scalar:
            return true;
        case kernel::avx2:
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
        case kernel::avx512:
            return cpu_has(kernel::avx2) && __builtin_cpu_supports("avx512f");
    }
    return false;
}

float x_prescale(kernel k) {
    return k == kernel::avx512 || k == kernel::avx2 ? 0x1p64f : 1.0f;
}

int max_tile(kernel k) {
    switch (k) {
        case kernel::scalar:
            return 8;
        case kernel::avx2:
            return 6;
        case kernel::avx512:
            return 12;
    }
    return 1;
}

size_t code_bytes(int64_t n_in, int64_t n_out) {
    const size_t bytes = static_cast<size_t>((n_out + panel_rows - 1) / panel_rows * panel_rows * n_in);
    return (bytes + 63) / 64 * 64;
}

size_t scale_bytes(int64_t n_out) {
    return static_cast<size_t>((n_out + panel_rows - 1) / panel_rows * panel_rows) * sizeof(float);
}

int64_t quantize_rows(source_type type, const void* src, size_t row_stride, const matrix& m, uint8_t* codes,
                      float* scales, float* kernel_scales, int64_t row_begin, int64_t row_end) {
    const fp8::format_traits ft = fp8::traits(m.format);
    // The half-float decode of e4m3 yields value * 2^-8 (fp8_panels.h); e5m2's is exact.
    const float kernel_factor = m.format == fp8::format::e4m3 ? 256.0f : 1.0f;
    std::vector<float> row(static_cast<size_t>(m.n_in));  // [n_in]
    for (int64_t r = row_begin; r < row_end; ++r) {
        const auto* bytes = static_cast<const uint8_t*>(src) + static_cast<size_t>(r) * row_stride;
        for (int64_t k = 0; k < m.n_in; ++k) {
            if (type == source_type::f32) {
                std::memcpy(&row[k], bytes + 4 * k, 4);
            } else {
                uint16_t h;
                std::memcpy(&h, bytes + 2 * k, 2);
                row[k] = type == source_type::f16 ? half_to_float(h) : bf16_to_float(h);
            }
        }
        float amax = 0.0f;
        for (const float v : row) {
            if (!std::isfinite(v)) return r;
            amax = std::max(amax, std::fabs(v));
        }
        const float scale = amax / ft.max_finite;
        uint8_t* panel = codes + static_cast<size_t>(r / panel_rows) * static_cast<size_t>(m.n_in * panel_rows);
        const int64_t lane = r % panel_rows;
        for (int64_t k = 0; k < m.n_in; ++k) {
            panel[k * panel_rows + lane] = scale > 0.0f ? fp8::encode(row[k] / scale, m.format) : 0;
        }
        scales[r] = scale;
        kernel_scales[r] = scale * kernel_factor;
    }
    return -1;
}

void tile_scalar(const tile_call& c) {
    const matrix& m = *c.m;
    const std::array<float, 256>& table = decode_table(m.format);
    const uint8_t* w = m.panel_codes(c.panel);
    const int64_t row0 = c.panel * panel_rows;
    const int64_t rows = std::min<int64_t>(panel_rows, m.n_out - row0);
    for (int t = 0; t < c.nt; ++t) {
        float acc[panel_rows] = {};
        for (int64_t k = 0; k < m.n_in; ++k) {
            const float xk = c.xt[k * c.nt + t];
            for (int64_t r = 0; r < panel_rows; ++r) acc[r] += table[w[k * panel_rows + r]] * xk;
        }
        float* yt = c.y + t * m.n_out + row0;
        for (int64_t r = 0; r < rows; ++r) yt[r] = acc[r] * m.row_scales(row0)[r];
    }
}

void matmul(kernel k, const shards& w, const float* x, float* y, int64_t n_tokens, const parallel_fn& parallel_for) {
    if (n_tokens <= 0) return;
    const matrix& m = w.parts[0];  // the shape (every shard has the whole weight's)
    void (*const tile)(const tile_call&) = k == kernel::avx512 ? tile_avx512
                                           : k == kernel::avx2 ? tile_avx2
                                                               : tile_scalar;
    const int64_t n_tiles = (n_tokens + max_tile(k) - 1) / max_tile(k);
    auto tile_begin = [&](int64_t i) { return n_tokens * i / n_tiles; };  // balanced tiles

    // Each tile's activations k-major: tile i at xt[tile_begin(i) * n_in], [n_in][its tokens]. One token's row is
    // already in that form.
    std::vector<float> packed;
    const float* xt = x;
    const float prescale = x_prescale(k);
    if (n_tokens > 1 || prescale != 1.0f) {
        packed.resize(static_cast<size_t>(n_tokens * m.n_in));
        parallel_for(n_tiles, 0, nullptr, 0, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
                const int64_t t0 = tile_begin(i), nt = tile_begin(i + 1) - t0;
                float* dst = packed.data() + t0 * m.n_in;
                for (int64_t t = 0; t < nt; ++t) {
                    const float* src = x + (t0 + t) * m.n_in;
                    for (int64_t kk = 0; kk < m.n_in; ++kk) dst[kk * nt + t] = src[kk] * prescale;
                }
            }
        });
        xt = packed.data();
    }

    const size_t panel_bytes = static_cast<size_t>(m.n_in) * 32;  // one panel's codes, [n_in][32]
    parallel_for(m.n_panels, panel_bytes, w.n > 1 ? w.panel_bounds : nullptr, w.n, [&](int64_t b, int64_t e) {
        int32_t s = 0;  // the shard holding panel b
        while (s + 1 < w.n && w.panel_bounds[s + 1] <= b) ++s;
        for (int64_t i0 = 0; i0 < n_tiles; i0 += tiles_per_block) {
            const int64_t i1 = std::min(n_tiles, i0 + tiles_per_block);
            int32_t si = s;
            for (int64_t panel = b; panel < e; ++panel) {
                while (w.panel_bounds[si + 1] <= panel) ++si;
                for (int64_t i = i0; i < i1; ++i) {
                    const int64_t t0 = tile_begin(i);
                    tile(tile_call{&w.parts[si], panel, xt + t0 * m.n_in, static_cast<int>(tile_begin(i + 1) - t0),
                                   y + t0 * m.n_out});
                }
            }
        }
    });
}

}  // namespace troupe::fp8_panels
