// Latent attention's kernels (cuda_mla.h) through the backend's host-buffer entry point, against the naive form
// computed on the host in double. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "kernels/fp16.h"
#include "tests/cuda/cuda_test_support.h"

namespace troupe {
namespace {

using testing::cuda_ops;
using testing::max_rel_error;
using testing::random_floats;

class cuda_mla : public testing::gpu_context_test {};

// Latent attention (DeepSeek-V2's MLA, cuda_mla.h) against the naive form computed here in double: every key row
// expanded into per-head keys W_UK c and values W_UV c, softmax over scale * (q_nope . k_nope + q_pe . k_pe). The new
// tokens' latents are normed and rotated (YaRN's blend where yarn_factor > 1) by the reference too, and their stored
// rows checked; earlier rows are random latents already in the pool. A tree call's tokens (rows, mask) as a
// speculative step's drafts: each sees the prefix rows and its masked ancestors.
struct mla_case {
    int32_t n_heads, kv_lora_rank, qk_nope, rope_dim, v_dim, block_size;
    std::vector<int32_t> pos0, n_new;  // per sequence (causal), or one sequence's prefix and drafts (tree)
    bool kv_f16;
    float yarn_factor;
    bool tree = false;
};

void run_mla_case(troupe_cuda_context* ctx, const mla_case& c) {
    const int32_t width = c.kv_lora_rank + c.rope_dim, head_dim = c.qk_nope + c.rope_dim, pairs = c.rope_dim / 2;
    const int32_t n_seqs = static_cast<int32_t>(c.pos0.size());
    std::vector<int32_t> offsets{0}, tables, positions, seq_of, rows, mask_base;
    std::vector<uint64_t> mask;
    int32_t next_block = 0;
    for (int32_t s = 0; s < n_seqs; ++s) {
        const int32_t n_blocks = (c.pos0[s] + c.n_new[s] + c.block_size - 1) / c.block_size;
        for (int32_t b = 0; b < n_blocks; ++b) tables.push_back((next_block++ * 7) % 300);  // scattered ids
        offsets.push_back(static_cast<int32_t>(tables.size()));
        for (int32_t i = 0; i < c.n_new[s]; ++i) {
            seq_of.push_back(s);
            if (!c.tree) {
                positions.push_back(c.pos0[s] + i);
                continue;
            }
            // Drafts in rows pos0 + i: draft 0 first, then alternately children of draft 0 and of the one before.
            const int32_t parent = i == 0 ? -1 : (i % 2 == 1 ? 0 : i - 1);
            uint64_t bits = uint64_t{1} << i;
            int32_t depth = 0;
            for (int32_t p = parent; p >= 0; p = p == 0 ? -1 : (p % 2 == 1 ? 0 : p - 1))
                bits |= uint64_t{1} << p, ++depth;
            rows.push_back(c.pos0[s] + i);
            mask_base.push_back(c.pos0[s]);
            mask.push_back(bits);
            positions.push_back(c.pos0[s] + depth);
        }
    }
    const int32_t n_pool_blocks = 300, n_tokens = static_cast<int32_t>(positions.size());
    const size_t pool_elems = static_cast<size_t>(n_pool_blocks) * c.block_size * width;
    std::vector<float> pool = random_floats(pool_elems, 31);
    if (c.kv_f16) {
        for (float& x : pool) x = fp16_to_fp32(fp32_to_fp16(x));
    }
    const auto q = random_floats(static_cast<size_t>(n_tokens) * c.n_heads * head_dim, 32, -1.0f, 1.0f);
    const auto latent = random_floats(static_cast<size_t>(n_tokens) * width, 33, -2.0f, 2.0f);
    const auto norm = random_floats(c.kv_lora_rank, 34, 0.5f, 1.5f);
    const size_t w_rows = static_cast<size_t>(c.n_heads) * (c.qk_nope + c.v_dim);
    const auto w_float = random_floats(w_rows * c.kv_lora_rank, 35, -0.2f, 0.2f);
    std::vector<uint16_t> w_half(w_float.size());
    for (size_t i = 0; i < w_half.size(); ++i) w_half[i] = fp32_to_fp16(w_float[i]);
    std::vector<float> freq(pairs), ramp(pairs);
    for (int32_t i = 0; i < pairs; ++i) {
        freq[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(c.rope_dim));
        ramp[i] = std::clamp(1.0f - static_cast<float>(i - 2) / static_cast<float>(std::max(1, pairs - 4)), 0.0f, 1.0f);
    }
    const troupe_cuda_matrix w{TROUPE_CUDA_F16, w_half.data(), c.kv_lora_rank, static_cast<int64_t>(w_rows),
                               static_cast<size_t>(c.kv_lora_rank) * 2};
    std::vector<uint16_t> pool_half(c.kv_f16 ? pool_elems : 0);
    for (size_t i = 0; i < pool_half.size(); ++i) pool_half[i] = fp32_to_fp16(pool[i]);
    std::vector<float> pool_gpu = pool, out(static_cast<size_t>(n_tokens) * c.n_heads * c.v_dim);

    troupe_cuda_mla_attention_args a{};
    a.struct_size = sizeof a;
    a.n_tokens = n_tokens;
    a.n_heads = c.n_heads;
    a.kv_lora_rank = c.kv_lora_rank;
    a.qk_nope = c.qk_nope;
    a.rope_dim = c.rope_dim;
    a.v_dim = c.v_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    a.eps = 1e-6f;
    a.q = q.data();
    a.latent = latent.data();
    a.kv_a_norm = norm.data();
    a.wkv_b = &w;
    a.rope_freq = freq.data();
    a.rope_ramp = ramp.data();
    a.yarn_factor = c.yarn_factor;
    a.out = out.data();
    a.positions = positions.data();
    a.seq_of = seq_of.data();
    a.n_seqs = n_seqs;
    a.block_table_offsets = offsets.data();
    a.block_tables = tables.data();
    a.block_size = c.block_size;
    a.n_blocks = n_pool_blocks;
    a.kv_type = c.kv_f16 ? TROUPE_CUDA_F16 : TROUPE_CUDA_F32;
    a.pool = c.kv_f16 ? static_cast<void*>(pool_half.data()) : pool_gpu.data();
    if (c.tree) {
        a.rows = rows.data();
        a.mask_base = mask_base.data();
        a.mask = mask.data();
        a.mask_words = 1;
    }
    EXPECT_OK(cuda_ops().test_mla_attention(ctx, &a));
    if (c.kv_f16) {
        for (size_t i = 0; i < pool_elems; ++i) pool_gpu[i] = fp16_to_fp32(pool_half[i]);
    }

    const auto row_at = [&](int32_t s, int32_t r) {
        const int32_t block = tables[offsets[s] + r / c.block_size];
        return (static_cast<size_t>(block) * c.block_size + r % c.block_size) * width;
    };
    // The new rows, normed and rotated, and each token's rotated query (double).
    std::vector<double> q_rot(q.begin(), q.end());
    float stored_err = 0.0f;
    for (int32_t t = 0; t < n_tokens; ++t) {
        std::vector<double> row(latent.begin() + static_cast<size_t>(t) * width,
                                latent.begin() + static_cast<size_t>(t + 1) * width);
        double ss = 0.0;
        for (int32_t i = 0; i < c.kv_lora_rank; ++i) ss += row[i] * row[i];
        const double inv = 1.0 / std::sqrt(ss / c.kv_lora_rank + 1e-6);
        for (int32_t i = 0; i < c.kv_lora_rank; ++i) row[i] *= inv * norm[i];
        for (int32_t i = 0; i < pairs; ++i) {
            double theta = static_cast<double>(positions[t]) * freq[i];
            if (c.yarn_factor != 1.0f) theta = theta / c.yarn_factor * (1.0 - ramp[i]) + theta * ramp[i];
            const double cs = std::cos(theta), sn = std::sin(theta);
            const auto rotate = [&](double* x) {
                const double x0 = x[2 * i], x1 = x[2 * i + 1];
                x[2 * i] = x0 * cs - x1 * sn;
                x[2 * i + 1] = x0 * sn + x1 * cs;
            };
            rotate(row.data() + c.kv_lora_rank);
            for (int32_t h = 0; h < c.n_heads; ++h)
                rotate(q_rot.data() + (static_cast<size_t>(t) * c.n_heads + h) * head_dim + c.qk_nope);
        }
        const size_t at = row_at(seq_of[t], c.tree ? rows[t] : positions[t]);
        for (int32_t i = 0; i < width; ++i) {
            stored_err = std::max(stored_err, static_cast<float>(std::fabs(pool_gpu[at + i] - row[i])));
        }
    }
    EXPECT_LT(stored_err, c.kv_f16 ? 4e-3f : 2e-4f) << "stored latent rows";

    // The naive form over the rows as stored (so an F16 pool's rounding is the reference's too): each row a token sees
    // expanded once into every head's key [qk_nope] and value [v_dim] (rows are shared by a sequence's tokens).
    std::map<size_t, std::vector<double>> expanded;  // pool offset -> [heads][qk_nope + v_dim]
    const auto expand = [&](size_t at) -> const std::vector<double>& {
        auto it = expanded.find(at);
        if (it != expanded.end()) return it->second;
        std::vector<double> e(w_rows);
        for (size_t o = 0; o < w_rows; ++o) {
            double sum = 0.0;
            for (int32_t r = 0; r < c.kv_lora_rank; ++r)
                sum += fp16_to_fp32(w_half[o * c.kv_lora_rank + r]) * static_cast<double>(pool_gpu[at + r]);
            e[o] = sum;
        }
        return expanded.emplace(at, std::move(e)).first->second;
    };
    std::vector<float> expected(out.size());
    for (int32_t t = 0; t < n_tokens; ++t) {
        std::vector<int32_t> keys;
        if (!c.tree) {
            for (int32_t j = 0; j <= positions[t]; ++j) keys.push_back(j);
        } else {
            for (int32_t j = 0; j < mask_base[t]; ++j) keys.push_back(j);
            for (int32_t b = 0; b < 64; ++b)
                if ((mask[t] >> b) & 1u) keys.push_back(mask_base[t] + b);
        }
        for (int32_t h = 0; h < c.n_heads; ++h) {
            const double* qh = q_rot.data() + (static_cast<size_t>(t) * c.n_heads + h) * head_dim;
            const size_t head_rows = static_cast<size_t>(h) * (c.qk_nope + c.v_dim);
            std::vector<double> scores;
            for (const int32_t j : keys) {
                const size_t at = row_at(seq_of[t], j);
                const std::vector<double>& e = expand(at);
                double sc = 0.0;
                for (int32_t i = 0; i < c.qk_nope; ++i) sc += qh[i] * e[head_rows + i];
                for (int32_t i = 0; i < c.rope_dim; ++i) sc += qh[c.qk_nope + i] * pool_gpu[at + c.kv_lora_rank + i];
                scores.push_back(sc * a.scale);
            }
            const double m = *std::max_element(scores.begin(), scores.end());
            double total = 0.0;
            for (double& sc : scores) total += (sc = std::exp(sc - m));
            for (int32_t v = 0; v < c.v_dim; ++v) {
                double o = 0.0;
                for (size_t k = 0; k < keys.size(); ++k) {
                    o += scores[k] / total * expand(row_at(seq_of[t], keys[k]))[head_rows + c.qk_nope + v];
                }
                expected[(static_cast<size_t>(t) * c.n_heads + h) * c.v_dim + v] = static_cast<float>(o);
            }
        }
    }
    EXPECT_LT(max_rel_error(out, expected), 2e-3f)
        << c.n_heads << " heads, rank " << c.kv_lora_rank << (c.kv_f16 ? ", F16 pool" : ", F32 pool")
        << (c.tree ? ", tree" : "");
}

TEST_F(cuda_mla, latent_attention_matches_the_naive_form_for_prefill_decode_trees_and_yarn) {
    const mla_case cases[] = {
        // DeepSeek-V2-Lite's shape: decodes far apart in depth and a prefill chunk, F32 and F16 pools, YaRN
        {16, 512, 128, 64, 128, 16, {300, 0, 40}, {1, 37, 3}, false, 1.0f},
        {16, 512, 128, 64, 128, 16, {300, 0, 40}, {1, 37, 3}, true, 40.0f},
        // a small odd shape (rank not a multiple of 32) and a tree of 5 drafts after 20 prefix rows
        {3, 40, 12, 8, 10, 5, {0, 9}, {9, 1}, false, 1.0f},
        {3, 40, 12, 8, 10, 5, {20}, {5}, true, 4.0f, true},
    };
    for (const mla_case& c : cases) run_mla_case(ctx_, c);
}

}  // namespace
}  // namespace troupe
