// linear::concatenated, linear::rows and linear::place: parts that multiply the same input (q/k/v, gate/up) multiplied
// as one matrix, wherever their rows lie, give exactly the parts' own products; so do rows of a weight taken as a
// weight of their own, and a weight placed in shards (one region per thread, kernels.weights: copy). Parts unlike
// each other are not concatenated.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/model/compute_context.h"
#include "core/model/linear.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/q8_panels.h"
#include "kernels/ref/quants.h"

namespace troupe {
namespace {

constexpr int64_t k_n_in = 64;

// Anonymous pages standing in for the file mapping weights come from (place() releases the pages it copied).
class mapped_rows {
public:
    explicit mapped_rows(size_t n) : n_(n) {
        p_ = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        EXPECT_NE(p_, MAP_FAILED);
    }
    ~mapped_rows() { ::munmap(p_, n_); }
    uint8_t* data() const { return static_cast<uint8_t*>(p_); }

private:
    void* p_;
    size_t n_;
};

// Random rows of `type`, n_out of them at dst.
void fill_rows(ggml_type type, int64_t n_out, uint8_t* dst, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> row(k_n_in);
    for (int64_t r = 0; r < n_out; ++r) {
        for (float& v : row) v = normal(rng);
        ref::quantize_row(type, row.data(), dst + r * row_bytes(type, k_n_in), k_n_in);
    }
}

std::vector<float> random_input(int64_t n_tokens, int64_t n_in) {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(n_tokens * n_in);
    for (float& v : x) v = normal(rng);
    return x;
}

// The parts' products side by side ([n_tokens][sum n_out]), each computed on its own.
std::vector<float> separate_products(const std::vector<linear>& parts, const float* x, int64_t n_tokens,
                                     const compute_context& ctx) {
    int64_t total = 0;
    for (const linear& p : parts) total += p.n_out();
    std::vector<float> y(n_tokens * total);
    int64_t at = 0;
    for (const linear& p : parts) {
        std::vector<float> yp(n_tokens * p.n_out());
        EXPECT_TRUE(p.forward(x, yp.data(), n_tokens, ctx).ok());
        for (int64_t t = 0; t < n_tokens; ++t)
            std::copy_n(yp.data() + t * p.n_out(), p.n_out(), y.data() + t * total + at);
        at += p.n_out();
    }
    return y;
}

void expect_concatenation_multiplies_like_the_parts(const std::vector<linear>& parts, const compute_context& ctx) {
    std::vector<const linear*> ptrs;
    for (const linear& p : parts) ptrs.push_back(&p);
    const std::optional<linear> all = linear::concatenated(ptrs);
    ASSERT_TRUE(all.has_value());
    int64_t total = 0;
    for (const linear& p : parts) total += p.n_out();
    ASSERT_EQ(all->n_out(), total);
    for (int64_t n_tokens : {1, 3, 16, 40}) {  // decode, small batches, and a GEMM-sized step
        const std::vector<float> x = random_input(n_tokens, k_n_in);
        std::vector<float> y(n_tokens * total);
        ASSERT_TRUE(all->forward(x.data(), y.data(), n_tokens, ctx).ok());
        EXPECT_EQ(y, separate_products(parts, x.data(), n_tokens, ctx)) << n_tokens << " tokens";
    }
}

std::vector<linear> make_parts(ggml_type type, const uint8_t* rows, const std::vector<int64_t>& n_outs,
                               const std::vector<size_t>& gaps_in_rows, cpu::activation_recipe recipe) {
    std::vector<linear> parts;
    const size_t stride = row_bytes(type, k_n_in);
    const uint8_t* at = rows;
    for (size_t i = 0; i < n_outs.size(); ++i) {
        at += (i < gaps_in_rows.size() ? gaps_in_rows[i] : 0) * stride;
        auto l = linear::make(weight_view{type, at, k_n_in, n_outs[i], stride}, nullptr, "part", recipe);
        EXPECT_TRUE(l.ok()) << l.message();
        parts.push_back(*l);
        at += n_outs[i] * stride;
    }
    return parts;
}

TEST(linear_concatenated, parts_back_to_back_multiply_as_their_separate_products) {
    cpu::thread_pool pool(2);
    const compute_context ctx = compute_context::over(pool);
    std::mt19937 rng(1);
    // Row kernels for every type here (Q8_0 / Q4_0 are not placed, so they keep their rows).
    for (ggml_type type : {ggml_type::f32, ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0}) {
        const std::vector<int64_t> n_outs{48, 16, 32};
        std::vector<uint8_t> rows(96 * row_bytes(type, k_n_in));
        fill_rows(type, 96, rows.data(), rng);
        SCOPED_TRACE(traits(type).name);
        for (auto recipe : {cpu::activation_recipe::quantized, cpu::activation_recipe::float32}) {
            expect_concatenation_multiplies_like_the_parts(make_parts(type, rows.data(), n_outs, {}, recipe), ctx);
        }
    }
}

TEST(linear_concatenated, parts_apart_in_memory_multiply_as_their_separate_products) {
    cpu::thread_pool pool(2);
    const compute_context ctx = compute_context::over(pool);
    std::mt19937 rng(2);
    // Gaps of 3 and 5 rows between the parts: three pieces. (Q8_0 parts whole panels: they would be packed if placed.)
    for (ggml_type type : {ggml_type::f16, ggml_type::q8_0}) {
        std::vector<uint8_t> rows(200 * row_bytes(type, k_n_in));
        fill_rows(type, 200, rows.data(), rng);
        const std::vector<int64_t> n_outs =
            type == ggml_type::f16 ? std::vector<int64_t>{40, 24, 64} : std::vector<int64_t>{48, 32, 64};
        for (auto recipe : {cpu::activation_recipe::quantized, cpu::activation_recipe::float32}) {
            expect_concatenation_multiplies_like_the_parts(make_parts(type, rows.data(), n_outs, {0, 3, 5}, recipe),
                                                           ctx);
        }
    }
}

TEST(linear_concatenated, parts_unlike_each_other_are_left_alone) {
    std::vector<uint8_t> rows(200 * row_bytes(ggml_type::f32, k_n_in));
    const auto q = cpu::activation_recipe::quantized;
    const auto concat = [](const std::vector<linear>& parts) {
        std::vector<const linear*> ptrs;
        for (const linear& p : parts) ptrs.push_back(&p);
        return linear::concatenated(ptrs);
    };
    EXPECT_TRUE(concat(make_parts(ggml_type::f32, rows.data(), {16, 16}, {}, q)).has_value());
    EXPECT_FALSE(concat({}).has_value());

    std::vector<linear> unlike = make_parts(ggml_type::f32, rows.data(), {16}, {}, q);
    const size_t f32_bytes = 16 * row_bytes(ggml_type::f32, k_n_in);
    const auto f16_next = linear::make(
        weight_view{ggml_type::f16, rows.data() + f32_bytes, k_n_in, 16, row_bytes(ggml_type::f16, k_n_in)}, nullptr,
        "f16 part", q);
    ASSERT_TRUE(f16_next.ok());
    unlike.push_back(*f16_next);
    EXPECT_FALSE(concat(unlike).has_value()) << "different types";

    std::vector<linear> recipes = make_parts(ggml_type::f32, rows.data(), {16}, {}, q);
    recipes.push_back(*linear::make(
        weight_view{ggml_type::f32, rows.data() + f32_bytes, k_n_in, 16, row_bytes(ggml_type::f32, k_n_in)}, nullptr,
        "float part", cpu::activation_recipe::float32));
    EXPECT_FALSE(concat(recipes).has_value()) << "different activation recipes";

    std::vector<linear> widths = make_parts(ggml_type::f32, rows.data(), {16}, {}, q);
    widths.push_back(*linear::make(
        weight_view{ggml_type::f32, rows.data() + f32_bytes, 2 * k_n_in, 8, row_bytes(ggml_type::f32, 2 * k_n_in)},
        nullptr, "wider part", q));
    EXPECT_FALSE(concat(widths).has_value()) << "different n_in";
}

// A quant plugin's weight lives in the plugin's memory: never part of a concatenation.
class claims_f32 final : public quant_op {
public:
    struct weight final : prepared_weight {
        size_t n_bytes() const override { return 0; }
    };
    std::string name() const override { return "claims_f32"; }
    bool claims(ggml_type type) const override { return type == ggml_type::f32; }
    result<std::shared_ptr<const prepared_weight>> prepare(const weight_view&) override {
        return std::shared_ptr<const prepared_weight>(std::make_shared<weight>());
    }
    status matmul(const prepared_weight&, const float*, float*, int64_t, const parallel_for_fn&) override {
        return make_error("not used");
    }
};

TEST(linear_concatenated, weights_a_quant_plugin_took_are_left_alone) {
    std::vector<uint8_t> rows(32 * row_bytes(ggml_type::f32, k_n_in));
    claims_f32 plugin;
    const size_t stride = row_bytes(ggml_type::f32, k_n_in);
    const auto a = linear::make(weight_view{ggml_type::f32, rows.data(), k_n_in, 16, stride}, &plugin, "a");
    const auto b =
        linear::make(weight_view{ggml_type::f32, rows.data() + 16 * stride, k_n_in, 16, stride}, &plugin, "b");
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE(a->by_plugin());
    const linear* parts[] = {&*a, &*b};
    EXPECT_FALSE(linear::concatenated(parts).has_value());
}

// Places each weight in `n_shards` shards (bounds at whole panels), each shard in its own buffer with a gap before
// it, as cpu_llama lays out one region per thread.
struct shard_buffers {
    std::vector<std::unique_ptr<cpu::aligned_buffer>> buffers;
};

void place_in_shards(linear& w, int n_shards, shard_buffers& mem, cpu::thread_pool& pool) {
    std::vector<int64_t> bounds(n_shards + 1);
    for (int s = 0; s <= n_shards; ++s) bounds[s] = std::min(w.n_out(), w.n_out() * s / n_shards / 16 * 16);
    bounds[n_shards] = w.n_out();
    std::vector<uint8_t*> dsts;
    for (int s = 0; s < n_shards; ++s) {
        mem.buffers.push_back(std::make_unique<cpu::aligned_buffer>());
        auto* base =
            static_cast<uint8_t*>(mem.buffers.back()->reserve(w.placed_bytes(bounds[s], bounds[s + 1]) + 4096));
        dsts.push_back(base + 4096);  // a gap: the shards are not back to back
    }
    ASSERT_TRUE(w.place(bounds, dsts, &pool).ok());
}

// Equal, or within float rounding where placing packed panels (the row kernels and the panel kernels sum the same
// integer products in another float order).
void expect_same_products(const std::vector<float>& got, const std::vector<float>& want, bool panels,
                          const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    if (!panels) {
        EXPECT_EQ(got, want) << what;
        return;
    }
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::fabs(want[i]))) << what;
}

// Rows copied (F32) or packed into panels (Q8_0, Q4_0), in 1, 2 and 3 shards: the same products as the file's rows;
// a concatenation placed as one weight, and its parts taken back as rows of it, too.
TEST(linear_place, weights_placed_in_shards_multiply_as_they_did_from_the_file) {
    for (ggml_type type : {ggml_type::f32, ggml_type::q8_0, ggml_type::q4_0}) {
        for (auto recipe : {cpu::activation_recipe::quantized, cpu::activation_recipe::float32}) {
            SCOPED_TRACE(std::string(traits(type).name) + (recipe == cpu::activation_recipe::float32 ? " float" : ""));
            cpu::thread_pool pool(2);
            const compute_context ctx = compute_context::over(pool);
            const std::vector<int64_t> n_outs{64, 32, 48};
            const size_t stride = row_bytes(type, k_n_in);
            mapped_rows rows(144 * stride);
            // The same rows again (placing releases the source pages, which then read as zeros).
            const auto refill = [&] {
                std::mt19937 rng(3);
                fill_rows(type, 144, rows.data(), rng);
            };
            for (int n_shards : {1, 2, 3}) {
                refill();
                const std::vector<linear> from_file = make_parts(type, rows.data(), n_outs, {}, recipe);
                const std::vector<float> x = random_input(3, k_n_in);
                const std::vector<float> want = separate_products(from_file, x.data(), 3, ctx);

                std::vector<linear> placed = make_parts(type, rows.data(), n_outs, {}, recipe);
                shard_buffers mem;
                for (linear& p : placed) place_in_shards(p, n_shards, mem, pool);
                const bool panels = cpu::q8_panels_supported(type, recipe);
                EXPECT_EQ(placed[0].packed(), panels);
                const std::string shards = std::to_string(n_shards) + " shards";
                expect_same_products(separate_products(placed, x.data(), 3, ctx), want, panels, shards);

                refill();
                std::vector<linear> parts = make_parts(type, rows.data(), n_outs, {}, recipe);
                std::vector<const linear*> ptrs{&parts[0], &parts[1], &parts[2]};
                std::optional<linear> group = linear::concatenated(ptrs);
                ASSERT_TRUE(group.has_value());
                place_in_shards(*group, n_shards, mem, pool);
                std::vector<float> y(3 * 144);
                ASSERT_TRUE(group->forward(x.data(), y.data(), 3, ctx).ok());
                expect_same_products(y, want, panels, "the placed group, " + shards);
                const std::vector<linear> views{group->rows(0, 64), group->rows(64, 96), group->rows(96, 144)};
                expect_same_products(separate_products(views, x.data(), 3, ctx), want, panels, "its parts, " + shards);
            }
        }
    }
}

// Panels of a part's last rows are padded: such a part cannot be followed by another in one matrix.
TEST(linear_concatenated, a_part_ending_in_a_padded_panel_is_not_followed_by_another) {
    if (!cpu::q8_panels_supported(ggml_type::q8_0, cpu::activation_recipe::quantized))
        GTEST_SKIP() << "no panel kernels on this CPU";
    cpu::thread_pool pool(2);
    std::mt19937 rng(4);
    const size_t stride = row_bytes(ggml_type::q8_0, k_n_in);
    mapped_rows rows(36 * stride);
    fill_rows(ggml_type::q8_0, 36, rows.data(), rng);
    std::vector<linear> parts =
        make_parts(ggml_type::q8_0, rows.data(), {20, 16}, {}, cpu::activation_recipe::quantized);
    shard_buffers mem;
    for (linear& p : parts) place_in_shards(p, 1, mem, pool);
    const linear* ptrs[] = {&parts[0], &parts[1]};
    EXPECT_FALSE(linear::concatenated(ptrs).has_value());
    const linear* reversed[] = {&parts[1], &parts[0]};  // 16 rows first: whole panels
    EXPECT_TRUE(linear::concatenated(reversed).has_value());
}

}  // namespace
}  // namespace troupe
