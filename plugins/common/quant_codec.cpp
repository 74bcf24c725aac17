// Block codecs (see quant_codec.h). Each recipe repeats kernels/ref's float operations in the same order, so that
// round to nearest writes the reference's bytes: Q8_0 and Q4_0 code against the unrounded scale (ggml's recipe),
// the scale-and-min formats against the stored fp16 scale and min, Q4_K fits each sub-block by least squares
// (min <= 0) and codes against the stored 6-bit scales.
#include "plugins/common/quant_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "plugins/common/half.h"

namespace troupe::quant_common {
namespace {

constexpr int k_sub = 32;  // Q4_K sub-block

// Q4_K's sub-block code: nearest_int((x - offset) / scale) in 0..15 (0 when the scale is 0).
int k_code(float x, float scale, float offset) {
    if (scale == 0.0f) return 0;
    return std::clamp(nearest_int((x - offset) / scale), 0, 15);
}

float k_grid_error(const float* x, int n, float scale, float offset) {
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float e = x[i] - (offset + scale * k_code(x[i], scale, offset));
        err += e * e;
    }
    return err;
}

// x ~ scale * q + offset, q in 0..15, offset <= 0: the min/max range, then least-squares refits of (scale,
// offset) while the squared error drops (kernels/ref's fit of a Q4_K sub-block).
void fit_k_sub_block(const float* x, int n, float* scale, float* min) {
    float lo = 0.0f, hi = x[0];
    for (int i = 0; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
    float best_scale = (hi - lo) / 15.0f, best_offset = lo;
    if (best_scale > 0.0f) {
        float best_err = k_grid_error(x, n, best_scale, best_offset);
        for (int iter = 0; iter < 8; ++iter) {
            double sq = 0, sqq = 0, sx = 0, sqx = 0;
            for (int i = 0; i < n; ++i) {
                const int q = k_code(x[i], best_scale, best_offset);
                sq += q;
                sqq += static_cast<double>(q) * q;
                sx += x[i];
                sqx += q * static_cast<double>(x[i]);
            }
            const double det = n * sqq - sq * sq;
            if (det <= 0) break;
            double s = (n * sqx - sq * sx) / det;
            double off = (sx - s * sq) / n;
            if (off > 0) {
                off = 0;
                s = sqx / sqq;
            }
            if (s <= 0) break;
            const float err = k_grid_error(x, n, static_cast<float>(s), static_cast<float>(off));
            if (err >= best_err) break;
            best_err = err;
            best_scale = static_cast<float>(s);
            best_offset = static_cast<float>(off);
        }
    }
    *scale = best_scale;
    *min = -best_offset;
}

// The weighted error of a sub-block on the grid scale * q + offset.
double k_weighted_error(const float* x, const float* w, int n, float scale, float offset) {
    double err = 0.0;
    for (int i = 0; i < n; ++i) {
        const double e = x[i] - (offset + scale * k_code(x[i], scale, offset));
        err += w[i] * e * e;
    }
    return err;
}

// Weighted fit of a Q4_K sub-block (llama.cpp's make_qkx2 idea): from 21 starting scales around 15 / range (the
// range of the weights whose weight is positive), codes then a weighted least-squares (scale, offset <= 0); the
// pair with the least weighted error on its own codes.
void fit_k_sub_block_weighted(const float* x, const float* w, int n, float* scale, float* min) {
    // The range of the weights that count (w > 0; all when none does), with min <= 0.
    bool any = false;
    for (int i = 0; i < n; ++i) any = any || w[i] > 0.0f;
    float lo = 0.0f, hi = 0.0f;
    bool first = true;
    for (int i = 0; i < n; ++i) {
        if (any && !(w[i] > 0.0f)) continue;
        hi = first ? x[i] : std::max(hi, x[i]);
        lo = std::min(lo, x[i]);
        first = false;
    }
    float best_scale = (hi - lo) / 15.0f, best_offset = lo;
    if (best_scale > 0.0f) {
        double best_err = k_weighted_error(x, w, n, best_scale, best_offset);
        for (int step = 0; step <= 20; ++step) {
            const float iscale = (14.0f + 0.1f * static_cast<float>(step)) / (hi - lo);
            double sw = 0, swq = 0, swqq = 0, swx = 0, swqx = 0;
            for (int i = 0; i < n; ++i) {
                const int q = std::clamp(nearest_int(iscale * (x[i] - lo)), 0, 15);
                sw += w[i];
                swq += w[i] * q;
                swqq += w[i] * static_cast<double>(q) * q;
                swx += w[i] * static_cast<double>(x[i]);
                swqx += w[i] * q * static_cast<double>(x[i]);
            }
            const double det = sw * swqq - swq * swq;
            if (!(det > 0)) continue;
            double sc = (sw * swqx - swq * swx) / det;
            double off = (swx - sc * swq) / sw;
            if (off > 0) {
                off = 0;
                sc = swqx / swqq;
            }
            if (!(sc > 0)) continue;
            const double err = k_weighted_error(x, w, n, static_cast<float>(sc), static_cast<float>(off));
            if (err < best_err) {
                best_err = err;
                best_scale = static_cast<float>(sc);
                best_offset = static_cast<float>(off);
            }
        }
    }
    *scale = best_scale;
    *min = -best_offset;
}

// A Q4_K grid from the 8 sub-blocks' scales and mins: the super-block's fp16 scales of scales, then 6-bit codes.
block_grid k_pack(const float* scales, const float* mins) {
    block_grid g;
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
        max_scale = std::max(max_scale, scales[j]);
        max_min = std::max(max_min, mins[j]);
    }
    g.d = fp32_to_fp16(max_scale / 63.0f);
    g.m = fp32_to_fp16(max_min / 63.0f);
    const float d = fp16_to_fp32(g.d), dmin = fp16_to_fp32(g.m);
    for (int j = 0; j < 8; ++j) {
        g.sc[j] = static_cast<uint8_t>(d > 0.0f ? std::clamp(nearest_int(scales[j] / d), 0, 63) : 0);
        g.mn[j] = static_cast<uint8_t>(dmin > 0.0f ? std::clamp(nearest_int(mins[j] / dmin), 0, 63) : 0);
    }
    return g;
}

// The scale and offset of Q4_K sub-block j: value = step * q + offset.
void k_step_offset(const block_grid& g, int j, float* step, float* min) {
    *step = fp16_to_fp32(g.d) * g.sc[j];
    *min = fp16_to_fp32(g.m) * g.mn[j];
}

int w4_code(float x, float d, float m) {
    if (!(d > 0.0f)) return 0;
    const float v = (x - m) / d;
    if (!(v > 0.0f)) return 0;  // also NaN
    if (v >= 15.0f) return 15;
    return nearest_int(v);
}

}  // namespace

const codec* codec::of(uint32_t type) {
    static const codec q8_0(codec_kind::q8_0, TROUPE_TYPE_Q8_0, 32, sizeof(troupe_block_q8_0), -127, 127);
    static const codec q4_0(codec_kind::q4_0, TROUPE_TYPE_Q4_0, 32, sizeof(troupe_block_q4_0), 0, 15);
    static const codec q4_1(codec_kind::q4_1, TROUPE_TYPE_Q4_1, 32, sizeof(troupe_block_q4_1), 0, 15);
    static const codec w4_g64(codec_kind::w4_g64, TROUPE_TYPE_W4_G64, 64, sizeof(troupe_block_w4_g64), 0, 15);
    static const codec w4_g128(codec_kind::w4_g128, TROUPE_TYPE_W4_G128, 128, sizeof(troupe_block_w4_g128), 0, 15);
    static const codec q4_k(codec_kind::q4_k, TROUPE_TYPE_Q4_K, 256, sizeof(troupe_block_q4_k), 0, 15);
    switch (type) {
        case TROUPE_TYPE_Q8_0:
            return &q8_0;
        case TROUPE_TYPE_Q4_0:
            return &q4_0;
        case TROUPE_TYPE_Q4_1:
            return &q4_1;
        case TROUPE_TYPE_W4_G64:
            return &w4_g64;
        case TROUPE_TYPE_W4_G128:
            return &w4_g128;
        case TROUPE_TYPE_Q4_K:
            return &q4_k;
        default:
            return nullptr;
    }
}

block_grid codec::fit(const float* x, float shrink) const {
    block_grid g;
    const int n = block_size_;
    switch (kind_) {
        case codec_kind::q8_0: {
            float amax = 0.0f;
            for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
            const float d = amax * shrink / 127.0f;
            g.d = fp32_to_fp16(d);
            g.inv = d != 0.0f ? 1.0f / d : 0.0f;
            return g;
        }
        case codec_kind::q4_0: {
            float amax = 0.0f, max = 0.0f;
            for (int j = 0; j < n; ++j) {
                if (std::fabs(x[j]) > amax) {
                    amax = std::fabs(x[j]);
                    max = x[j];
                }
            }
            const float d = max * shrink / -8.0f;
            g.d = fp32_to_fp16(d);
            g.inv = d != 0.0f ? 1.0f / d : 0.0f;
            return g;
        }
        case codec_kind::q4_1:
        case codec_kind::w4_g64:
        case codec_kind::w4_g128: {
            float lo = x[0], hi = x[0];
            for (int j = 1; j < n; ++j) {
                lo = std::min(lo, x[j]);
                hi = std::max(hi, x[j]);
            }
            lo *= shrink;
            hi *= shrink;
            g.d = fp32_to_fp16((hi - lo) / 15.0f);
            g.m = fp32_to_fp16(lo);
            return g;
        }
        case codec_kind::q4_k: {
            float scales[8], mins[8];  // [8 sub-blocks]
            for (int j = 0; j < 8; ++j) fit_k_sub_block(x + k_sub * j, k_sub, &scales[j], &mins[j]);
            return k_pack(scales, mins);
        }
    }
    return g;
}

int codec::code(const block_grid& g, int j, float x) const {
    switch (kind_) {
        case codec_kind::q8_0: {
            const float v = std::round(x * g.inv);
            if (!(v > -127.0f)) return v != v ? 0 : -127;
            return v >= 127.0f ? 127 : static_cast<int>(v);
        }
        case codec_kind::q4_0: {
            const float v = x * g.inv + 8.5f;
            if (!(v > 0.0f)) return 0;
            if (v >= 15.0f) return 15;
            return static_cast<int>(v);
        }
        case codec_kind::q4_1:
        case codec_kind::w4_g64:
        case codec_kind::w4_g128:
            return w4_code(x, fp16_to_fp32(g.d), fp16_to_fp32(g.m));
        case codec_kind::q4_k: {
            float step, min;
            k_step_offset(g, j / k_sub, &step, &min);
            return k_code(x, step, -min);
        }
    }
    return 0;
}

float codec::value(const block_grid& g, int j, int q) const {
    switch (kind_) {
        case codec_kind::q8_0:
            return static_cast<float>(q) * fp16_to_fp32(g.d);
        case codec_kind::q4_0:
            return static_cast<float>(q - 8) * fp16_to_fp32(g.d);
        case codec_kind::q4_1:
        case codec_kind::w4_g64:
        case codec_kind::w4_g128: {
            const float scaled = fp16_to_fp32(g.d) * static_cast<float>(q);
            return scaled + fp16_to_fp32(g.m);
        }
        case codec_kind::q4_k: {
            float step, min;
            k_step_offset(g, j / k_sub, &step, &min);
            return step * static_cast<float>(q) - min;
        }
    }
    return 0.0f;
}

void codec::write(const block_grid& g, const int8_t* q, void* dst) const {
    const int n = block_size_;
    switch (kind_) {
        case codec_kind::q8_0: {
            troupe_block_q8_0 b;
            b.d = g.d;
            std::memcpy(b.qs, q, sizeof b.qs);
            std::memcpy(dst, &b, sizeof b);
            return;
        }
        case codec_kind::q4_0:
        case codec_kind::q4_1:
        case codec_kind::w4_g64:
        case codec_kind::w4_g128: {
            // {fp16 d, [fp16 m], qs[n / 2]}: weight j < n / 2 the low nibble of qs[j], weight j + n / 2 the high.
            auto* out = static_cast<uint8_t*>(dst);
            std::memcpy(out, &g.d, 2);
            size_t header = 2;
            if (kind_ != codec_kind::q4_0) {
                std::memcpy(out + 2, &g.m, 2);
                header = 4;
            }
            for (int j = 0; j < n / 2; ++j)
                out[header + j] = static_cast<uint8_t>((q[j] & 15) | ((q[j + n / 2] & 15) << 4));
            return;
        }
        case codec_kind::q4_k: {
            troupe_block_q4_k b;
            b.d = g.d;
            b.dmin = g.m;
            std::memset(b.scales, 0, sizeof b.scales);
            for (int j = 0; j < 4; ++j) {
                b.scales[j] = static_cast<uint8_t>(g.sc[j] | ((g.sc[j + 4] >> 4) << 6));
                b.scales[j + 4] = static_cast<uint8_t>(g.mn[j] | ((g.mn[j + 4] >> 4) << 6));
                b.scales[j + 8] = static_cast<uint8_t>((g.sc[j + 4] & 0x0f) | ((g.mn[j + 4] & 0x0f) << 4));
            }
            // chunk c of 64 weights: sub-block 2c in the low nibbles of qs[32c ..], sub-block 2c + 1 in the high.
            for (int c = 0; c < 4; ++c) {
                for (int l = 0; l < 32; ++l)
                    b.qs[32 * c + l] = static_cast<uint8_t>((q[64 * c + l] & 15) | ((q[64 * c + 32 + l] & 15) << 4));
            }
            std::memcpy(dst, &b, sizeof b);
            return;
        }
    }
}

void codec::encode(const float* x, void* dst, int64_t n) const {
    int8_t q[256];  // [block_size]
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / block_size_; ++b) {
        const float* xb = x + b * block_size_;
        const block_grid g = fit(xb);
        for (int j = 0; j < block_size_; ++j) q[j] = static_cast<int8_t>(code(g, j, xb[j]));
        write(g, q, out + static_cast<size_t>(b) * block_bytes_);
    }
}

block_grid codec::read_grid(const void* block) const {
    block_grid g;
    const auto* in = static_cast<const uint8_t*>(block);
    std::memcpy(&g.d, in, 2);
    if (kind_ == codec_kind::q8_0 || kind_ == codec_kind::q4_0) {
        const float d = fp16_to_fp32(g.d);
        g.inv = d != 0.0f ? 1.0f / d : 0.0f;
        return g;
    }
    std::memcpy(&g.m, in + 2, 2);
    if (kind_ == codec_kind::q4_k) {
        const uint8_t* s = in + 4;  // scales[12]
        for (int j = 0; j < 8; ++j) {
            if (j < 4) {
                g.sc[j] = s[j] & 63;
                g.mn[j] = s[j + 4] & 63;
            } else {
                g.sc[j] = static_cast<uint8_t>((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
                g.mn[j] = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
            }
        }
    }
    return g;
}

void codec::decode(const void* src, float* y, int64_t n) const {
    const auto* in = static_cast<const uint8_t*>(src);
    const int bs = block_size_;
    for (int64_t b = 0; b < n / bs; ++b) {
        const uint8_t* blk = in + static_cast<size_t>(b) * block_bytes_;
        const block_grid g = read_grid(blk);
        float* yb = y + b * bs;
        for (int j = 0; j < bs; ++j) {
            int q = 0;
            switch (kind_) {
                case codec_kind::q8_0:
                    q = static_cast<int8_t>(blk[2 + j]);
                    break;
                case codec_kind::q4_0:
                    q = j < bs / 2 ? blk[2 + j] & 15 : blk[2 + j - bs / 2] >> 4;
                    break;
                case codec_kind::q4_1:
                case codec_kind::w4_g64:
                case codec_kind::w4_g128:
                    q = j < bs / 2 ? blk[4 + j] & 15 : blk[4 + j - bs / 2] >> 4;
                    break;
                case codec_kind::q4_k: {
                    const uint8_t* qs = blk + 4 + TROUPE_K_SCALE_SIZE;
                    const int c = j / 64, l = j % 64;
                    q = l < 32 ? qs[32 * c + l] & 15 : qs[32 * c + l - 32] >> 4;
                    break;
                }
            }
            yb[j] = value(g, j, q);
        }
    }
}

double block_error(const codec& c, const block_grid& g, const float* x, const float* importance) {
    double err = 0.0;
    for (int j = 0; j < c.block_size(); ++j) {
        const double e = static_cast<double>(x[j]) - c.value(g, j, c.code(g, j, x[j]));
        err += (importance != nullptr ? importance[j] : 1.0) * e * e;
    }
    return err;
}

block_grid fit_q4_k_weighted(const float* x, const float* importance) {
    float ones[k_sub];
    std::fill(ones, ones + k_sub, 1.0f);
    float scales[8], mins[8];  // [8 sub-blocks]
    for (int j = 0; j < 8; ++j) {
        fit_k_sub_block_weighted(x + k_sub * j, importance != nullptr ? importance + k_sub * j : ones, k_sub,
                                 &scales[j], &mins[j]);
    }
    return k_pack(scales, mins);
}

void for_each_grid_candidate(const codec& c, const float* x, const float* importance, int n_steps, float min_shrink,
                             const std::function<void(const block_grid&)>& f) {
    const block_grid full = c.fit(x, 1.0f);
    f(full);
    if (c.kind() == codec_kind::q4_k) {
        f(fit_q4_k_weighted(x, importance));
        return;
    }
    for (int i = 1; i <= n_steps; ++i)
        f(c.fit(x, 1.0f - (1.0f - min_shrink) * static_cast<float>(i) / static_cast<float>(n_steps)));
}

block_grid fit_clipped(const codec& c, const float* x, const float* importance, int n_steps, float min_shrink) {
    block_grid best;
    double best_err = -1.0;
    for_each_grid_candidate(c, x, importance, n_steps, min_shrink, [&](const block_grid& g) {
        const double err = block_error(c, g, x, importance);
        if (best_err < 0.0 || err < best_err) {
            best_err = err;
            best = g;
        }
    });
    return best;
}

void quantize_block(const codec& c, const block_grid& g, const float* x, int8_t* q, float* y) {
    for (int j = 0; j < c.block_size(); ++j) {
        const int code = c.code(g, j, x[j]);
        q[j] = static_cast<int8_t>(code);
        if (y != nullptr) y[j] = c.value(g, j, code);
    }
}

}  // namespace troupe::quant_common
