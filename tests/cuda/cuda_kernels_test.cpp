// Every CUDA kernel against its scalar twin in kernels/ref (or written out here, for the architecture features'
// elementwise kernels), on odd shapes, through the backend's host-buffer entry points. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/model/moe_router.h"
#include "kernels/fp16.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace troupe {
namespace {

using testing::cuda_ops;
using testing::max_rel_error;
using testing::random_floats;

class cuda_kernels : public testing::gpu_context_test {};

TEST_F(cuda_kernels, rms_norm_matches_the_reference_on_odd_widths) {
    for (auto [n_rows, dim] : {std::pair{1, 64}, {3, 100}, {5, 4097}}) {
        const auto x = random_floats(static_cast<size_t>(n_rows) * dim, 1, -3.0f, 3.0f);
        const auto w = random_floats(dim, 2, 0.5f, 1.5f);
        std::vector<float> y(x.size()), expected(x.size());
        EXPECT_OK(cuda_ops().test_rms_norm(ctx_, x.data(), w.data(), y.data(), n_rows, dim, 1e-5f));
        ref::rmsnorm(x.data(), w.data(), expected.data(), n_rows, dim, 1e-5f);
        EXPECT_LT(max_rel_error(y, expected), 1e-5f) << n_rows << " x " << dim;
    }
}

TEST_F(cuda_kernels, rope_matches_the_reference_in_both_modes_with_partial_rotation_and_scaling) {
    struct rope_case {
        int32_t n_heads, head_dim, n_rot;
        bool neox;
        float base, freq_scale;
        std::vector<int32_t> positions;
    };
    const rope_case cases[] = {
        {8, 8, 8, false, 10000.0f, 1.0f, {0, 1, 2, 3, 4}},
        {4, 64, 64, false, 10000.0f, 1.0f, {0, 7, 511, 4095}},
        {3, 96, 32, true, 500000.0f, 0.25f, {1, 100, 30000}},
        {2, 128, 128, true, 10000.0f, 1.0f, {5, 6}},
    };
    for (const rope_case& c : cases) {
        const int32_t n_tokens = static_cast<int32_t>(c.positions.size());
        auto x = random_floats(static_cast<size_t>(n_tokens) * c.n_heads * c.head_dim, 3);
        auto expected = x;
        EXPECT_OK(cuda_ops().test_rope(ctx_, x.data(), c.positions.data(), n_tokens, c.n_heads, c.head_dim, c.n_rot,
                                       c.base, c.freq_scale, c.neox ? 1 : 0));
        const rope_params p{c.head_dim, c.n_rot, c.neox, c.base, c.freq_scale, nullptr};
        ref::rope(expected.data(), n_tokens, c.n_heads, c.positions.data(), p);
        EXPECT_LT(max_rel_error(x, expected), 1e-5f) << "head_dim " << c.head_dim << " neox " << c.neox;
    }
}

// A weight matrix of `type` from floats, with a row stride wider than the row (as GGUF views may have).
struct host_matrix {
    std::vector<uint8_t> bytes;
    troupe_cuda_matrix m;
    matmul_weight ref;
};

host_matrix make_matrix(ggml_type type, int64_t n_in, int64_t n_out, uint32_t seed) {
    const auto x = random_floats(static_cast<size_t>(n_in * n_out), seed);
    const size_t elem = type == ggml_type::f32 ? 4 : 2;
    const size_t stride = (n_in + 3) * elem;
    host_matrix h;
    h.bytes.assign(stride * n_out, 0);
    for (int64_t r = 0; r < n_out; ++r) {
        for (int64_t i = 0; i < n_in; ++i) {
            const float v = x[r * n_in + i];
            uint8_t* dst = h.bytes.data() + r * stride + i * elem;
            if (type == ggml_type::f32) {
                std::memcpy(dst, &v, 4);
            } else {
                const uint16_t b = type == ggml_type::f16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
                std::memcpy(dst, &b, 2);
            }
        }
    }
    h.m = troupe_cuda_matrix{static_cast<uint32_t>(type), h.bytes.data(), n_in, n_out, stride};
    h.ref = matmul_weight{type, h.bytes.data(), n_in, n_out, stride};
    return h;
}

TEST_F(cuda_kernels, matmul_matches_the_reference_for_each_weight_type_and_both_implementations) {
    struct shape {
        int32_t n_tokens;
        int64_t n_in, n_out;
    };
    for (ggml_type type : {ggml_type::f32, ggml_type::f16, ggml_type::bf16}) {
        for (const shape s : {shape{1, 64, 64}, shape{7, 172, 64}, shape{33, 256, 300}, shape{2, 8, 512}}) {
            const host_matrix w = make_matrix(type, s.n_in, s.n_out, 11);
            const auto x = random_floats(static_cast<size_t>(s.n_tokens) * s.n_in, 12);
            std::vector<float> y(static_cast<size_t>(s.n_tokens) * s.n_out), expected(y.size());
            // cuBLASLt: activations rounded to the weight type, F32 accumulation = ref::matmul's recipe.
            EXPECT_OK(cuda_ops().test_matmul(ctx_, TROUPE_CUDA_MATMUL_CUBLASLT, &w.m, x.data(), y.data(), s.n_tokens));
            ref::matmul(w.ref, x.data(), expected.data(), s.n_tokens);
            EXPECT_LT(max_rel_error(y, expected), type == ggml_type::f32 ? 1e-5f : 1e-4f)
                << traits(type).name << " cuBLASLt " << s.n_tokens << "x" << s.n_in << "x" << s.n_out;
            // The simple kernel keeps the activations in F32 = ref::matmul_float_act.
            EXPECT_OK(cuda_ops().test_matmul(ctx_, TROUPE_CUDA_MATMUL_SIMPLE, &w.m, x.data(), y.data(), s.n_tokens));
            ref::matmul_float_act(w.ref, x.data(), expected.data(), s.n_tokens);
            EXPECT_LT(max_rel_error(y, expected), 1e-5f)
                << traits(type).name << " simple " << s.n_tokens << "x" << s.n_in << "x" << s.n_out;
        }
    }
}

// A layer's q, k, v (and its FFN's gate and up with the activation) made together: in decode one launch reads every
// matrix (launch_gemv_parts), elsewhere one product each; either way each output has the bits of its own product, and
// the fused GLU those of the products followed by the activation kernel.
TEST_F(cuda_kernels, products_made_together_and_the_fused_glu_have_the_bits_of_one_product_each) {
    for (ggml_type type : {ggml_type::f32, ggml_type::f16, ggml_type::bf16}) {
        for (int32_t n_tokens : {1, 2, 5}) {
            const int64_t n_in = 264;  // not a multiple of 32 vectors: the GEMV's tail loop runs too
            const host_matrix wq = make_matrix(type, n_in, 300, 31), wk = make_matrix(type, n_in, 40, 32),
                              wv = make_matrix(type, n_in, 41, 33);
            const auto x = random_floats(static_cast<size_t>(n_tokens) * n_in, 34);
            const troupe_cuda_matrix ws[3] = {wq.m, wk.m, wv.m};
            std::vector<float> q(n_tokens * 300), k(n_tokens * 40), v(n_tokens * 41);
            float* ys[3] = {q.data(), k.data(), v.data()};
            EXPECT_OK(cuda_ops().test_matmul_group(ctx_, ws, 3, x.data(), n_tokens, 0, ys));
            int i = 0;
            for (const std::vector<float>* y : {&q, &k, &v}) {
                std::vector<float> own(y->size());
                EXPECT_OK(
                    cuda_ops().test_matmul(ctx_, TROUPE_CUDA_MATMUL_CUBLASLT, &ws[i], x.data(), own.data(), n_tokens));
                EXPECT_EQ(*y, own) << traits(type).name << " part " << i << ", " << n_tokens << " tokens";
                ++i;
            }

            const host_matrix wg = make_matrix(type, n_in, 129, 35), wu = make_matrix(type, n_in, 129, 36);
            const troupe_cuda_matrix glu_ws[2] = {wg.m, wu.m};
            std::vector<float> gate(n_tokens * 129), up(gate.size()), hidden(gate.size()), scratch(gate.size()),
                expected(gate.size());
            EXPECT_OK(
                cuda_ops().test_matmul(ctx_, TROUPE_CUDA_MATMUL_CUBLASLT, &wg.m, x.data(), gate.data(), n_tokens));
            EXPECT_OK(cuda_ops().test_matmul(ctx_, TROUPE_CUDA_MATMUL_CUBLASLT, &wu.m, x.data(), up.data(), n_tokens));
            for (int32_t glu : {1, 2}) {
                float* glu_ys[2] = {hidden.data(), scratch.data()};
                EXPECT_OK(cuda_ops().test_matmul_group(ctx_, glu_ws, 2, x.data(), n_tokens, glu, glu_ys));
                const auto act = glu == 1 ? cuda_ops().test_swiglu : cuda_ops().test_geglu;
                EXPECT_OK(act(ctx_, gate.data(), up.data(), expected.data(), static_cast<int64_t>(gate.size())));
                EXPECT_EQ(hidden, expected) << traits(type).name << " glu " << glu << ", " << n_tokens << " tokens";
            }
        }
    }
}

// The experts' router against the CPU's (core/model/moe_router.h): softmax and sigmoid gating, with and without a
// choice bias, renormalised or scaled, near-ties included (logits repeated: ties go to the lower id on both).
TEST_F(cuda_kernels, moe_routing_chooses_the_cpu_routers_experts_with_its_weights) {
    const int32_t n_tokens = 37;
    for (int32_t n_experts : {4, 8, 64}) {
        for (int32_t n_used : {1, 2, 6}) {
            if (n_used > n_experts) continue;
            auto logits = random_floats(static_cast<size_t>(n_tokens) * n_experts, 51, -4.0f, 4.0f);
            for (int32_t t = 0; t < n_tokens; t += 5) logits[t * n_experts + 1] = logits[t * n_experts];  // ties
            const auto bias = random_floats(n_experts, 52, -0.5f, 0.5f);
            for (moe_gating gating : {moe_gating::softmax, moe_gating::sigmoid}) {
                for (int variant = 0; variant < 3; ++variant) {
                    moe_params p;
                    p.n_experts = n_experts;
                    p.n_used = n_used;
                    p.gating = gating;
                    p.norm_weights = variant == 0;
                    p.weights_scale = variant == 2 ? 2.5f : 1.0f;
                    const float* b = variant == 1 ? bias.data() : nullptr;
                    std::vector<int32_t> experts(static_cast<size_t>(n_tokens) * n_used), want_experts(experts.size());
                    std::vector<float> weights(experts.size()), want_weights(experts.size());
                    route_tokens(logits.data(), n_tokens, p, b, want_experts.data(), want_weights.data());
                    EXPECT_OK(cuda_ops().test_moe_route(ctx_, logits.data(), n_tokens, n_experts, n_used,
                                                        static_cast<int32_t>(gating), p.norm_weights ? 1 : 0,
                                                        p.weights_scale, b, experts.data(), weights.data()));
                    EXPECT_EQ(experts, want_experts) << n_experts << " experts, " << n_used << " used, variant "
                                                     << variant << ", gating " << static_cast<int>(gating);
                    EXPECT_LT(max_rel_error(weights, want_weights), 1e-5f);
                }
            }
        }
    }
}

// The copy probe `troupe bench --device cuda` prints decode's rate beside: a plausible rate for any GPU's memory, and
// arguments that cannot be timed refused.
TEST_F(cuda_kernels, the_copy_probe_measures_a_plausible_bandwidth_and_refuses_an_empty_copy) {
    double gbs = 0.0;
    EXPECT_OK(cuda_ops().measure_copy(ctx_, uint64_t{64} << 20, 3, &gbs));
    EXPECT_GT(gbs, 50.0);
    EXPECT_LT(gbs, 100000.0);
    const char* e = cuda_ops().measure_copy(ctx_, 0, 3, &gbs);
    ASSERT_NE(e, nullptr);
    EXPECT_NE(std::string(e).find("both must be positive"), std::string::npos) << e;
}

TEST_F(cuda_kernels, swiglu_matches_the_reference) {
    const auto gate = random_floats(1001, 4, -6.0f, 6.0f);
    const auto up = random_floats(1001, 5);
    std::vector<float> out(gate.size()), expected(gate.size());
    EXPECT_OK(cuda_ops().test_swiglu(ctx_, gate.data(), up.data(), out.data(), static_cast<int64_t>(gate.size())));
    ref::swiglu(gate.data(), up.data(), expected.data(), static_cast<int64_t>(gate.size()));
    EXPECT_LT(max_rel_error(out, expected), 1e-5f);
}

TEST_F(cuda_kernels, embedding_rows_match_the_reference_for_each_table_type) {
    const std::vector<int32_t> tokens{0, 49, 7, 7, 23};
    for (ggml_type type : {ggml_type::f32, ggml_type::f16, ggml_type::bf16}) {
        const host_matrix table = make_matrix(type, 40, 50, 6);
        std::vector<float> out(tokens.size() * 40), expected(out.size());
        EXPECT_OK(
            cuda_ops().test_embed(ctx_, &table.m, tokens.data(), static_cast<int32_t>(tokens.size()), out.data()));
        ref::embedding(table.ref, tokens.data(), static_cast<int64_t>(tokens.size()), expected.data());
        EXPECT_EQ(out, expected) << traits(type).name;
    }
}

// One attention step: sequences with earlier cache rows (random, already in the pools) plus this
// step's tokens, over scattered blocks; both pool types (F16 pools hold F16-exact values, so the
// float reference applies unchanged).
struct attention_case {
    int32_t n_heads, n_kv_heads, head_dim, block_size;
    std::vector<int32_t> pos0;   // per sequence: first new position
    std::vector<int32_t> n_new;  // per sequence: new tokens
    bool kv_f16;
    float softcap = 0.0f;  // scores s -> softcap * tanh(s / softcap); 0: none (Gemma 2)
    int32_t window = 0;    // positions > p - window; 0: all (sliding-window layers)
};

void run_attention_case(troupe_cuda_context* ctx, const attention_case& c) {
    const int32_t n_seqs = static_cast<int32_t>(c.pos0.size());
    const int32_t kv_width = c.n_kv_heads * c.head_dim;
    std::vector<int32_t> offsets{0}, tables, positions, seq_of;
    int32_t next_block = 0;
    for (int32_t s = 0; s < n_seqs; ++s) {
        const int32_t n_blocks = (c.pos0[s] + c.n_new[s] + c.block_size - 1) / c.block_size;
        for (int32_t b = 0; b < n_blocks; ++b) tables.push_back((next_block++ * 7) % 1000);  // scattered ids
        offsets.push_back(static_cast<int32_t>(tables.size()));
        for (int32_t i = 0; i < c.n_new[s]; ++i) positions.push_back(c.pos0[s] + i), seq_of.push_back(s);
    }
    const int32_t n_pool_blocks = 1000;
    const int32_t n_tokens = static_cast<int32_t>(positions.size());
    const auto f16_exact = [&](std::vector<float> v) {
        if (c.kv_f16) {
            for (float& x : v) x = fp16_to_fp32(fp32_to_fp16(x));
        }
        return v;
    };
    const size_t pool_elems = static_cast<size_t>(n_pool_blocks) * c.block_size * kv_width;
    std::vector<float> k_pool = f16_exact(random_floats(pool_elems, 21)),
                       v_pool = f16_exact(random_floats(pool_elems, 22));
    const auto q = random_floats(static_cast<size_t>(n_tokens) * c.n_heads * c.head_dim, 23, -2.0f, 2.0f);
    const auto k = f16_exact(random_floats(static_cast<size_t>(n_tokens) * kv_width, 24, -2.0f, 2.0f));
    const auto v = f16_exact(random_floats(static_cast<size_t>(n_tokens) * kv_width, 25));

    std::vector<uint16_t> k_half(c.kv_f16 ? pool_elems : 0), v_half(k_half.size());
    for (size_t i = 0; i < k_half.size(); ++i) k_half[i] = fp32_to_fp16(k_pool[i]), v_half[i] = fp32_to_fp16(v_pool[i]);
    std::vector<float> k_gpu = k_pool, v_gpu = v_pool;
    std::vector<float> out(q.size()), expected(q.size());

    troupe_cuda_attention_args a{};
    a.struct_size = sizeof a;
    a.n_tokens = n_tokens;
    a.n_heads = c.n_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.out = out.data();
    a.positions = positions.data();
    a.seq_of = seq_of.data();
    a.n_seqs = n_seqs;
    a.block_table_offsets = offsets.data();
    a.block_tables = tables.data();
    a.block_size = c.block_size;
    a.n_blocks = n_pool_blocks;
    a.kv_type = c.kv_f16 ? TROUPE_CUDA_F16 : TROUPE_CUDA_F32;
    a.k_pool = c.kv_f16 ? static_cast<void*>(k_half.data()) : k_gpu.data();
    a.v_pool = c.kv_f16 ? static_cast<void*>(v_half.data()) : v_gpu.data();
    a.softcap = c.softcap;
    a.window = c.window;
    EXPECT_OK(cuda_ops().test_attention(ctx, &a));

    std::vector<const int32_t*> table_ptrs;
    for (int32_t s = 0; s < n_seqs; ++s) table_ptrs.push_back(tables.data() + offsets[s]);
    attention_call call{};
    call.n_tokens = n_tokens;
    call.n_heads = c.n_heads;
    call.n_kv_heads = c.n_kv_heads;
    call.head_dim = c.head_dim;
    call.scale = a.scale;
    call.q = q.data();
    call.k = k.data();
    call.v = v.data();
    call.out = expected.data();
    call.positions = positions.data();
    call.seq_of = seq_of.data();
    call.n_seqs = n_seqs;
    call.block_tables = table_ptrs.data();
    call.block_size = c.block_size;
    call.k_pool = k_pool.data();
    call.v_pool = v_pool.data();
    call.softcap = c.softcap;
    call.window = c.window;
    ref::attention(call);

    EXPECT_LT(max_rel_error(out, expected), 1e-5f)
        << "head_dim " << c.head_dim << " f16 " << c.kv_f16 << " softcap " << c.softcap << " window " << c.window;
    if (c.kv_f16) {
        for (size_t i = 0; i < pool_elems; ++i) k_gpu[i] = fp16_to_fp32(k_half[i]), v_gpu[i] = fp16_to_fp32(v_half[i]);
    }
    EXPECT_EQ(k_gpu, k_pool) << "the K rows of this step land where the reference puts them";
    EXPECT_EQ(v_gpu, v_pool);
}

TEST_F(cuda_kernels, attention_over_scattered_blocks_matches_the_reference) {
    const attention_case cases[] = {
        {8, 4, 8, 16, {0, 30}, {5, 3}, false},          // stories260K's shape: a prefill and a chunk
        {4, 1, 64, 4, {100, 0, 37}, {1, 1, 6}, false},  // MQA, decodes and a draft verification
        {8, 2, 128, 16, {1000}, {2}, false},            // long context, several chunks of 32 keys
        {2, 2, 256, 8, {33}, {3}, true},                // the largest head, F16 pools
        {6, 3, 40, 5, {0, 9}, {9, 1}, true},            // head size not a multiple of 32
        {8, 2, 64, 16, {5, 0}, {70, 40}, false},        // prefill chunks of several tiles of 32 queries
        // Decode steps, whose keys are split among warps: depths far apart in one step, one deep sequence
        {8, 2, 64, 16, {2000, 3, 517}, {1, 1, 1}, true},
        {4, 4, 128, 16, {4095}, {1}, false},
        {32, 8, 64, 16, {1500, 40, 900, 64, 1, 2047, 300, 33}, {1, 1, 1, 1, 1, 1, 1, 1}, false},
    };
    for (const attention_case& c : cases) run_attention_case(ctx_, c);
}

// Gemma 2's soft-capping and the sliding windows of Mistral / Phi-3 / Gemma 2's even layers: windows shorter than a
// chunk of 32 keys, starting inside a block, longer than the context (no effect), and a window of 1 (itself only).
TEST_F(cuda_kernels, attention_with_soft_capping_and_sliding_windows_matches_the_reference) {
    const attention_case cases[] = {
        {8, 4, 8, 16, {0, 30}, {5, 3}, false, 50.0f, 0},          // capping only (Gemma 2's 50)
        {8, 4, 8, 16, {0, 30}, {5, 3}, false, 0.0f, 4},           // a prefill and a chunk across a window of 4
        {4, 1, 64, 4, {100, 0, 37}, {1, 1, 6}, false, 0.0f, 33},  // decodes past the window, one inside it
        {8, 2, 128, 16, {1000}, {2}, true, 1.5f, 100},            // a long context, small cap, F16 pools
        {6, 3, 40, 5, {0, 9}, {9, 1}, false, 0.0f, 1},            // each token sees itself only
        {2, 2, 256, 8, {33}, {3}, false, 30.0f, 4096},            // a window wider than the context
        {8, 2, 64, 16, {5, 0}, {70, 40}, true, 50.0f, 20},        // tiles of 32 queries across a window of 20
        {8, 2, 64, 16, {3000, 200}, {1, 1}, false, 30.0f, 700},   // split decode inside a window, capped
    };
    for (const attention_case& c : cases) run_attention_case(ctx_, c);
}

// GeGLU as the CPU graph computes it (core/model/cpu_ops.cpp geglu_rows): tanh GELU of the gate rounded to F16.
TEST_F(cuda_kernels, geglu_matches_the_scalar_twin_on_f16_rounded_gates) {
    const auto gate = random_floats(1001, 41, -6.0f, 6.0f);
    const auto up = random_floats(1001, 42);
    std::vector<float> out(gate.size()), expected(gate.size());
    EXPECT_OK(cuda_ops().test_geglu(ctx_, gate.data(), up.data(), out.data(), static_cast<int64_t>(gate.size())));
    constexpr float sqrt_2_over_pi = 0.7978845608028654f;
    for (size_t i = 0; i < gate.size(); ++i) {
        const float x = fp16_to_fp32(fp32_to_fp16(gate[i]));
        expected[i] = 0.5f * x * (1.0f + std::tanh(sqrt_2_over_pi * x * (1.0f + 0.044715f * x * x))) * up[i];
    }
    EXPECT_LT(max_rel_error(out, expected), 1e-5f);
}

// qwen2's q/k/v biases: added to every row after the product.
TEST_F(cuda_kernels, bias_add_adds_the_bias_to_every_row) {
    const int32_t n_rows = 7, width = 96;
    auto x = random_floats(static_cast<size_t>(n_rows) * width, 43);
    const auto bias = random_floats(width, 44);
    std::vector<float> expected = x;
    for (int32_t r = 0; r < n_rows; ++r) {
        for (int32_t i = 0; i < width; ++i) expected[static_cast<size_t>(r) * width + i] += bias[i];
    }
    EXPECT_OK(cuda_ops().test_add_bias(ctx_, x.data(), bias.data(), n_rows, width));
    EXPECT_EQ(x, expected);  // one float add each: exact
}

// Final logit soft-capping (Gemma 2's 30): x -> c tanh(x / c), odd in x and bounded by c.
TEST_F(cuda_kernels, soft_capping_matches_the_scalar_twin) {
    auto x = random_floats(777, 45, -200.0f, 200.0f);
    std::vector<float> expected(x.size());
    for (size_t i = 0; i < x.size(); ++i) expected[i] = 30.0f * std::tanh(x[i] / 30.0f);
    EXPECT_OK(cuda_ops().test_softcap(ctx_, x.data(), static_cast<int64_t>(x.size()), 30.0f));
    EXPECT_LT(max_rel_error(x, expected), 1e-5f);
    for (float v : x) EXPECT_LE(std::fabs(v), 30.0f);
}

}  // namespace
}  // namespace troupe
