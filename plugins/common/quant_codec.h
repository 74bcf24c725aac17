// Block codecs of the weight formats the offline quantizers write (plugins/quant/rtn, gptq, awq), in the layouts
// of plugins/include/troupe/types.h, with SDK-only includes.
//
// A row of n weights is n / block_size blocks; every block has one grid, the set of values its codes decode to:
//
//   Q8_0     (32)  value = d * q                      q in -127..127    d fp16
//   Q4_0     (32)  value = (q - 8) * d                q in 0..15        d fp16
//   Q4_1     (32)  value = d * q + m                  q in 0..15        d, m fp16
//   W4_G64   (64)  as Q4_1, groups of 64
//   W4_G128 (128)  as Q4_1, groups of 128
//   Q4_K    (256)  value = (d * sc[j]) * q - dmin * mn[j] for the weight's sub-block j of 32, q in 0..15,
//                  d, dmin fp16, sc, mn 6-bit codes packed as llama.cpp's get_scale_min_k4
//
// The quantizers split the work in three steps, so that GPTQ can quantize one column at a time and AWQ can search
// over ranges:  fit (choose a block's grid from its weights) -> code (the code of one weight on that grid) ->
// write (pack a block's grid and codes). `encode` is round to nearest, all three in a row, and writes exactly the
// bytes of troupe's reference quantizers (kernels/ref quantize_row) for the same input; `value` decodes exactly
// as the reference dequantizers do.
#pragma once

#include <troupe/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>

namespace troupe::quant_common {

// One block's grid as it will be stored.
struct block_grid {
    uint16_t d = 0;                  // fp16 bits: the scale (Q4_K: the super-block's scale of scales)
    uint16_t m = 0;                  // fp16 bits: the min (Q4_1, W4_G*) or Q4_K's dmin; unused by Q8_0 and Q4_0
    uint8_t sc[8] = {}, mn[8] = {};  // Q4_K: the 6-bit scale and min code of each sub-block of 32
    float inv = 0.0f;                // Q8_0, Q4_0: 1 / the unrounded scale, what codes are taken against
};

enum class codec_kind { q8_0, q4_0, q4_1, w4_g64, w4_g128, q4_k };

class codec {
public:
    // The codec of `type` (a troupe_type), or null when there is none.
    static const codec* of(uint32_t type);

    codec_kind kind() const { return kind_; }
    uint32_t type() const { return type_; }
    int block_size() const { return block_size_; }
    size_t block_bytes() const { return block_bytes_; }
    int q_min() const { return q_min_; }
    int q_max() const { return q_max_; }

    // The grid of the block x[block_size]: the reference's round-to-nearest range, scaled by `shrink` (0 < shrink
    // <= 1; 1 is the reference recipe exactly). Q4_K fits each sub-block by least squares and ignores shrink.
    block_grid fit(const float* x, float shrink = 1.0f) const;
    // The code of weight j (0..block_size) of a block, value x, on grid g: the reference's rounding, clamped.
    int code(const block_grid& g, int j, float x) const;
    // The value code q of weight j decodes to (exactly as the reference dequantizer computes it).
    float value(const block_grid& g, int j, int q) const;
    // Packs grid g and codes q[block_size] into one block at dst (block_bytes() bytes).
    void write(const block_grid& g, const int8_t* q, void* dst) const;

    // Round to nearest: the row x[n] (n a multiple of block_size) into n / block_size blocks at dst.
    void encode(const float* x, void* dst, int64_t n) const;
    // The grid stored in one block (codes are then taken against the stored scale).
    block_grid read_grid(const void* block) const;
    // y[n] = the weights of the encoded row src.
    void decode(const void* src, float* y, int64_t n) const;

private:
    codec(codec_kind kind, uint32_t type, int block_size, size_t block_bytes, int q_min, int q_max)
        : kind_(kind), type_(type), block_size_(block_size), block_bytes_(block_bytes), q_min_(q_min), q_max_(q_max) {}

    codec_kind kind_;
    uint32_t type_;
    int block_size_;
    size_t block_bytes_;
    int q_min_, q_max_;
};

// Σ importance[j] * (x[j] - value(code(x[j])))² over a block on grid g (importance null: all 1).
double block_error(const codec& c, const block_grid& g, const float* x, const float* importance);

// Q4_K only: each sub-block's scale and min from a search over starting scales with weighted least-squares refits
// (llama.cpp's make_qkx2 idea; importance null: all 1).
block_grid fit_q4_k_weighted(const float* x, const float* importance);

// Clipping search: the grid of the block x among fit(x, shrink) for shrink = 1, 1 - step, ..., down to
// min_shrink, with the least block_error (weighted by importance, may be null). Ties keep the wider range.
// Q4_K: the better of fit(x) and fit_q4_k_weighted(x, importance).
block_grid fit_clipped(const codec& c, const float* x, const float* importance, int n_steps = 20,
                       float min_shrink = 0.5f);

// The grids a clipping search compares for the block x (importance: the weights' weights, may be null), each passed to
// f(const block_grid&): fit(x) first, then the range shrunk by 1 - step, ..., down to min_shrink; Q4_K instead
// fit_q4_k_weighted(x, importance).
void for_each_grid_candidate(const codec& c, const float* x, const float* importance, int n_steps, float min_shrink,
                             const std::function<void(const block_grid&)>& f);

// Quantizes x[block_size] on grid g: codes into q, and the decoded values into y (may be null).
void quantize_block(const codec& c, const block_grid& g, const float* x, int8_t* q, float* y);

}  // namespace troupe::quant_common
