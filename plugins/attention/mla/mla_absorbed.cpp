#include "mla_absorbed.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "plugins/common/plugin_support.h"

namespace troupe::mla {
namespace {

using plugin_support::run_parallel;

constexpr int32_t rows_per_block = 16;  // cache rows loaded (and converted) together
constexpr int32_t min_split_keys = 64;  // a split of a token's keys has at least this many
constexpr int32_t max_splits = 16;

// Phase 2 for one item: the partial softmax over its keys of the group's heads.
void attend_item(const mla_step& s, const int32_t* tokens, const absorbed_scratch::item& it, const float* q_all,
                 float* partial) {
    const mla_shape& sh = s.shape();
    const vec_ops& v = s.vec;
    const int32_t lw = sh.latent_width(), rank = sh.kv_lora_rank;
    const int32_t t = tokens[it.token];
    const int32_t seq = s.seq_of(t);
    const int32_t h0 = it.group * heads_per_group;
    const int32_t g = std::min(heads_per_group, sh.n_heads - h0);
    int32_t extra[max_extra_rows];
    const token_keys keys{s.n_prefix(t), s.extra_rows(t, extra), extra};

    std::vector<float> rows(static_cast<size_t>(rows_per_block) * lw);  // [rows_per_block, latent]
    float scores[rows_per_block];
    const float* q = q_all + static_cast<size_t>(it.token) * sh.n_heads * lw;
    const size_t stride = 2 + static_cast<size_t>(rank);  // partial of one head: m, l, o[rank]
    for (int32_t i = 0; i < g; ++i) {
        float* p = partial + i * stride;
        p[0] = -std::numeric_limits<float>::infinity();
        std::fill(p + 1, p + stride, 0.0f);
    }
    for (int32_t k0 = it.k0; k0 < it.k1; k0 += rows_per_block) {
        const int32_t nb = std::min(rows_per_block, it.k1 - k0);
        for (int32_t j = 0; j < nb; ++j) {
            v.load(s.latent_row(seq, keys.row(k0 + j)), s.f16(), rows.data() + static_cast<size_t>(j) * lw, lw);
        }
        for (int32_t i = 0; i < g; ++i) {
            v.gemv(rows.data(), lw, nb, q + static_cast<size_t>(h0 + i) * lw, lw, scores);
            float* p = partial + i * stride;
            const float block_max = *std::max_element(scores, scores + nb);
            if (block_max > p[0]) {
                const float correction = std::exp(p[0] - block_max);  // 0 on the first block
                p[1] *= correction;
                v.scale(p + 2, correction, rank);
                p[0] = block_max;
            }
            for (int32_t j = 0; j < nb; ++j) {
                scores[j] = std::exp(scores[j] - p[0]);
                p[1] += scores[j];
            }
            v.axpy_rows(p + 2, scores, rows.data(), lw, nb, rank);
        }
    }
}

}  // namespace

int32_t run_absorbed(const mla_step& s, const int32_t* tokens, int32_t n, absorbed_scratch& scratch,
                     const troupe_parallel* parallel) {
    if (n <= 0) return TROUPE_OK;
    const mla_shape& sh = s.shape();
    const troupe_attention_call& c = s.call;
    const vec_ops& v = s.vec;
    const int32_t H = sh.n_heads, lw = sh.latent_width(), rank = sh.kv_lora_rank, hd = sh.head_dim();
    const int32_t il = c.layer;

    // 1. q' = scale · [W_UK_hᵀ q_nope ; q_pe] per (token, head).
    scratch.q.assign(static_cast<size_t>(n) * H * lw, 0.0f);
    int32_t rc = run_parallel(parallel, static_cast<int64_t>(n) * H, [&](int64_t b, int64_t e) {
        for (int64_t item = b; item < e; ++item) {
            const int32_t i = static_cast<int32_t>(item / H), h = static_cast<int32_t>(item % H);
            const float* q = c.q + (static_cast<size_t>(tokens[i]) * H + h) * hd;  // [qk_nope, then rope_dim]
            float* qa = scratch.q.data() + (static_cast<size_t>(i) * H + h) * lw;
            const int64_t w_uk = static_cast<int64_t>(h) * sh.kv_b_rows_per_head();  // W_UK_h: [qk_nope, rank]
            for (int32_t d = 0; d < sh.qk_nope; ++d)
                v.axpy_w(qa, c.scale * q[d], s.model.kv_b_row(il, w_uk + d), s.model.kv_b_type(), rank);
            for (int32_t d = 0; d < sh.rope_dim; ++d) qa[rank + d] = c.scale * q[sh.qk_nope + d];
        }
    });
    if (rc != TROUPE_OK) return rc;

    // 2. Items: (token, group, split of its keys), consecutive per (token, group).
    const int32_t n_groups = (H + heads_per_group - 1) / heads_per_group;
    scratch.items.clear();
    scratch.first_item.assign(static_cast<size_t>(n) * n_groups + 1, 0);
    int32_t extra[max_extra_rows];
    for (int32_t i = 0; i < n; ++i) {
        const int32_t t = tokens[i];
        const int32_t n_keys = s.n_prefix(t) + s.extra_rows(t, extra);
        const int32_t want = std::max(min_split_keys, (n_keys + max_splits - 1) / max_splits);
        const int32_t per_split = (want + rows_per_block - 1) / rows_per_block * rows_per_block;
        for (int32_t grp = 0; grp < n_groups; ++grp) {
            scratch.first_item[static_cast<size_t>(i) * n_groups + grp] = static_cast<int32_t>(scratch.items.size());
            for (int32_t k0 = 0; k0 < n_keys; k0 += per_split)
                scratch.items.push_back({i, grp, k0, std::min(n_keys, k0 + per_split)});
        }
    }
    scratch.first_item.back() = static_cast<int32_t>(scratch.items.size());
    const size_t stride = 2 + static_cast<size_t>(rank);
    const size_t item_floats = static_cast<size_t>(heads_per_group) * stride;
    scratch.partial.resize(scratch.items.size() * item_floats);
    rc = run_parallel(parallel, static_cast<int64_t>(scratch.items.size()), [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
            attend_item(s, tokens, scratch.items[static_cast<size_t>(k)], scratch.q.data(),
                        scratch.partial.data() + static_cast<size_t>(k) * item_floats);
        }
    });
    if (rc != TROUPE_OK) return rc;

    // 3. Merge each (token, head)'s partials, normalise, and expand with W_UV_h.
    return run_parallel(parallel, static_cast<int64_t>(n) * H, [&](int64_t b, int64_t e) {
        std::vector<float> o(static_cast<size_t>(rank));
        for (int64_t item = b; item < e; ++item) {
            const int32_t i = static_cast<int32_t>(item / H), h = static_cast<int32_t>(item % H);
            const int32_t grp = h / heads_per_group, slot = h % heads_per_group;
            const size_t at = static_cast<size_t>(i) * n_groups + grp;
            const int32_t first = scratch.first_item[at], last = scratch.first_item[at + 1];
            const auto head_partial = [&](int32_t k) {
                return scratch.partial.data() + static_cast<size_t>(k) * item_floats + slot * stride;
            };
            float m = -std::numeric_limits<float>::infinity();
            for (int32_t k = first; k < last; ++k) m = std::max(m, head_partial(k)[0]);
            std::fill(o.begin(), o.end(), 0.0f);
            float l = 0.0f;
            for (int32_t k = first; k < last; ++k) {
                const float* p = head_partial(k);
                const float w = std::exp(p[0] - m);
                l += w * p[1];
                v.axpy(o.data(), w, p + 2, rank);
            }
            v.scale(o.data(), 1.0f / l, rank);
            float* out = c.out + (static_cast<size_t>(tokens[i]) * H + h) * sh.v_dim;
            v.gemv_w(s.model.w_uv(il, h), s.model.kv_b_type(), rank, sh.v_dim, o.data(), rank, out);
        }
    });
}

}  // namespace troupe::mla
