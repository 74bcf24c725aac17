// core/train's ops: each backward against central finite differences of L = Σ y ⊙ r (r random, so dL/dy = r), on
// odd shapes; the losses against differences of the loss itself; AdamW on a quadratic.
#include <gtest/gtest.h>

#include <cmath>

#include "core/train/activations.h"
#include "core/train/adam.h"
#include "core/train/attention.h"
#include "core/train/distill.h"
#include "core/train/linear.h"
#include "core/train/losses.h"
#include "core/train/rmsnorm.h"
#include "core/train/rope.h"
#include "tests/train/gradient_check.h"

namespace troupe::train {
namespace {

using testing::dot;
using testing::expect_gradient;
using testing::random_values;

TEST(train_ops, linear_backward_matches_central_differences) {
    cpu::thread_pool pool(2);
    const int64_t n = 5, in = 7, out = 6;
    auto x = random_values(n * in, 1), w = random_values(out * in, 2), b = random_values(out, 3);
    const auto r = random_values(n * out, 4);
    std::vector<float> y(n * out);
    auto loss = [&] {
        linear_forward(x.data(), w.data(), b.data(), y.data(), n, in, out, pool);
        return dot(y, r);
    };
    std::vector<float> dx(n * in, 0.0f), dw(out * in, 0.0f), db(out, 0.0f);
    linear_backward(x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data(), n, in, out, pool);
    expect_gradient("dx", x, dx, loss);
    expect_gradient("dW", w, dw, loss);
    expect_gradient("db", b, db, loss);
}

TEST(train_ops, rmsnorm_backward_matches_central_differences) {
    const int64_t n = 4, dim = 9;
    auto x = random_values(n * dim, 5, 2.0f), w = random_values(dim, 6);
    const auto r = random_values(n * dim, 7);
    std::vector<float> y(n * dim), inv(n);
    auto loss = [&] {
        rmsnorm_forward(x.data(), w.data(), y.data(), inv.data(), n, dim, 1e-5f);
        return dot(y, r);
    };
    loss();
    std::vector<float> dx(n * dim, 0.0f), dw(dim, 0.0f);
    rmsnorm_backward(x.data(), w.data(), inv.data(), r.data(), dx.data(), dw.data(), n, dim);
    expect_gradient("dx", x, dx, loss);
    expect_gradient("dw", w, dw, loss);
}

TEST(train_ops, silu_and_swiglu_backward_match_central_differences) {
    const int64_t n = 17;
    auto a = random_values(n, 8, 4.0f), u = random_values(n, 9, 2.0f);
    const auto r = random_values(n, 10);
    std::vector<float> y(n);
    auto silu_loss = [&] {
        silu_forward(a.data(), y.data(), n);
        return dot(y, r);
    };
    std::vector<float> da(n, 0.0f);
    silu_backward(a.data(), r.data(), da.data(), n);
    expect_gradient("silu da", a, da, silu_loss);
    auto swiglu_loss = [&] {
        swiglu_forward(a.data(), u.data(), y.data(), n);
        return dot(y, r);
    };
    std::vector<float> dg(n, 0.0f), du(n, 0.0f);
    swiglu_backward(a.data(), u.data(), r.data(), dg.data(), du.data(), n);
    expect_gradient("swiglu dg", a, dg, swiglu_loss);
    expect_gradient("swiglu du", u, du, swiglu_loss);
}

TEST(train_ops, rope_backward_matches_central_differences_in_both_pair_layouts) {
    for (bool neox : {false, true}) {
        const rope_params p{8, 6, neox, 10000.0f, 1.0f, nullptr};  // 6 of 8 dims rotated: the rest pass through
        const int64_t n = 3, heads = 2;
        const std::vector<int32_t> pos{0, 5, 17};
        const std::vector<float> cs = rope_table(pos.data(), n, p);
        auto x = random_values(n * heads * 8, 11);
        const auto r = random_values(n * heads * 8, 12);
        auto loss = [&] {
            std::vector<float> y = x;
            rope_forward(y.data(), cs.data(), n, heads, p);
            return dot(y, r);
        };
        std::vector<float> dx(x.size(), 0.0f);
        rope_backward(r.data(), cs.data(), dx.data(), n, heads, p);
        expect_gradient(neox ? "neox dx" : "normal dx", x, dx, loss, 48);
    }
}

TEST(train_ops, causal_gqa_attention_backward_matches_central_differences_over_segments) {
    cpu::thread_pool pool(2);
    const attention_shape s{4, 2, 4};
    const std::vector<int64_t> bounds{0, 3, 7};  // two sequences of 3 and 4 rows
    const int64_t n = 7;
    auto q = random_values(n * 4 * 4, 13), k = random_values(n * 2 * 4, 14), v = random_values(n * 2 * 4, 15);
    const auto r = random_values(n * 4 * 4, 16);
    std::vector<float> o(n * 4 * 4);
    attention_cache cache;
    auto loss = [&] {
        attention_forward(q.data(), k.data(), v.data(), o.data(), bounds, s, cache, pool);
        return dot(o, r);
    };
    loss();
    std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
    attention_backward(q.data(), k.data(), v.data(), r.data(), bounds, s, cache, dq.data(), dk.data(), dv.data(), pool);
    expect_gradient("dq", q, dq, loss, 40);
    expect_gradient("dk", k, dk, loss, 40);
    expect_gradient("dv", v, dv, loss, 40);
}

TEST(train_ops, attention_rows_see_only_their_own_segment_up_to_themselves) {
    cpu::thread_pool pool(1);
    const attention_shape s{2, 1, 4};
    const std::vector<int64_t> bounds{0, 2, 5};
    auto q = random_values(5 * 8, 17), k = random_values(5 * 4, 18), v = random_values(5 * 4, 19);
    std::vector<float> o1(5 * 8), o2(5 * 8);
    attention_cache cache;
    attention_forward(q.data(), k.data(), v.data(), o1.data(), bounds, s, cache, pool);
    for (int i = 3 * 4; i < 5 * 4; ++i) v[i] += 1.0f;  // rows 3 and 4: later than row 2, another segment than 0, 1
    attention_forward(q.data(), k.data(), v.data(), o2.data(), bounds, s, cache, pool);
    for (int i = 0; i < 3 * 8; ++i) EXPECT_EQ(o1[i], o2[i]) << i;
    EXPECT_NE(o1[4 * 8], o2[4 * 8]);
}

TEST(train_ops, attention_over_stacked_passes_backward_matches_central_differences) {
    cpu::thread_pool pool(2);
    const attention_shape s{4, 2, 4};
    const std::vector<int64_t> bounds{0, 9, 15};  // 3 passes of 3 positions, 3 passes of 2
    const int64_t n = 15;
    auto q = random_values(n * 4 * 4, 23), k = random_values(n * 2 * 4, 24), v = random_values(n * 2 * 4, 25);
    const auto r = random_values(n * 4 * 4, 26);
    std::vector<float> o(n * 4 * 4);
    attention_cache cache;
    auto loss = [&] {
        attention_forward(q.data(), k.data(), v.data(), o.data(), bounds, s, cache, pool, 3);
        return dot(o, r);
    };
    loss();
    std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
    attention_backward(q.data(), k.data(), v.data(), r.data(), bounds, s, cache, dq.data(), dk.data(), dv.data(), pool,
                       3);
    expect_gradient("dq", q, dq, loss, 40);
    expect_gradient("dk", k, dk, loss, 40);
    expect_gradient("dv", v, dv, loss, 40);
}

// attention.h's formulas term by term in double over visible_rows (the reference for the vectorized products).
struct attention_reference {
    std::vector<double> o, dq, dk, dv;
};
attention_reference reference_attention(const std::vector<float>& q, const std::vector<float>& k,
                                        const std::vector<float>& v, const std::vector<float>& d_o,
                                        const std::vector<int64_t>& bounds, const attention_shape& s, int32_t passes) {
    const int64_t hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
    attention_reference r;
    r.o.assign(q.size(), 0.0);
    r.dq.assign(q.size(), 0.0);
    r.dk.assign(k.size(), 0.0);
    r.dv.assign(v.size(), 0.0);
    std::vector<int64_t> seen;
    for (size_t sg = 0; sg + 1 < bounds.size(); ++sg) {
        const int64_t r0 = bounds[sg], t = bounds[sg + 1] - r0;
        for (int64_t i = 0; i < t; ++i) {
            visible_rows(t, passes, i, seen);
            for (int64_t h = 0; h < s.n_heads; ++h) {
                const int64_t qrow = ((r0 + i) * s.n_heads + h) * hd;
                auto kv_row = [&](int64_t j) { return ((r0 + j) * s.n_kv_heads + h / group) * hd; };
                std::vector<double> p(seen.size()), dp(seen.size());
                double mx = -1e300, sum = 0.0, pdp = 0.0;
                for (size_t a = 0; a < seen.size(); ++a) {
                    double sc = 0.0;
                    for (int64_t d = 0; d < hd; ++d) sc += double{q[qrow + d]} * k[kv_row(seen[a]) + d];
                    p[a] = sc / std::sqrt(static_cast<double>(hd));
                    mx = std::max(mx, p[a]);
                }
                for (double& x : p) sum += x = std::exp(x - mx);
                for (size_t a = 0; a < seen.size(); ++a) {
                    p[a] /= sum;
                    for (int64_t d = 0; d < hd; ++d) {
                        r.o[qrow + d] += p[a] * v[kv_row(seen[a]) + d];
                        dp[a] += double{d_o[qrow + d]} * v[kv_row(seen[a]) + d];
                        r.dv[kv_row(seen[a]) + d] += p[a] * d_o[qrow + d];
                    }
                    pdp += p[a] * dp[a];
                }
                for (size_t a = 0; a < seen.size(); ++a) {
                    const double g = p[a] * (dp[a] - pdp) / std::sqrt(static_cast<double>(hd));
                    for (int64_t d = 0; d < hd; ++d) {
                        r.dq[qrow + d] += g * k[kv_row(seen[a]) + d];
                        r.dk[kv_row(seen[a]) + d] += g * q[qrow + d];
                    }
                }
            }
        }
    }
    return r;
}

void expect_close(const char* what, const std::vector<float>& got, const std::vector<double>& want) {
    double scale = 0.0, worst = 0.0;
    for (double x : want) scale = std::max(scale, std::abs(x));
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
    EXPECT_LT(worst, 2e-5 * scale + 1e-6) << what << ": largest difference " << worst << " of values up to " << scale;
}

// At a drafter's shape (8 query heads per KV head, head_dim of whole and partial 16-float tiles, segments not
// multiples of 16) the vectorized products equal the formulas, with one pass and with EAGLE's two.
TEST(train_ops, attention_at_a_drafters_shape_equals_the_formulas_term_by_term) {
    cpu::thread_pool pool(2);
    for (const int64_t hd : {64, 40}) {
        for (const int32_t passes : {1, 2}) {
            SCOPED_TRACE("head_dim " + std::to_string(hd) + ", passes " + std::to_string(passes));
            const attention_shape s{16, 2, hd};
            const std::vector<int64_t> bounds{0, 38, 38 + 2 * 29, 38 + 2 * 29 + 2 * 3};
            const int64_t n = bounds.back();
            const auto q = random_values(n * 16 * hd, 31), k = random_values(n * 2 * hd, 32),
                       v = random_values(n * 2 * hd, 33), d_o = random_values(n * 16 * hd, 34);
            std::vector<float> o(q.size()), dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
            attention_cache cache;
            attention_forward(q.data(), k.data(), v.data(), o.data(), bounds, s, cache, pool, passes);
            attention_backward(q.data(), k.data(), v.data(), d_o.data(), bounds, s, cache, dq.data(), dk.data(),
                               dv.data(), pool, passes);
            const attention_reference want = reference_attention(q, k, v, d_o, bounds, s, passes);
            expect_close("o", o, want.o);
            expect_close("dq", dq, want.dq);
            expect_close("dk", dk, want.dk);
            expect_close("dv", dv, want.dv);
        }
    }
}

TEST(train_ops, a_later_pass_row_sees_the_context_before_its_chain_and_its_chain) {
    // 3 passes of 4 positions: rows 0-3 pass 1, 4-7 pass 2, 8-11 pass 3.
    std::vector<int64_t> seen;
    visible_rows(12, 3, 2, seen);  // pass 1, position 2: causal
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2}));
    visible_rows(12, 3, 6, seen);  // pass 2, position 2: context 0..1, itself
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 6}));
    visible_rows(12, 3, 11, seen);  // pass 3, position 3: context 0..1, pass 2 at 2, itself
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 6, 11}));
    visible_rows(12, 3, 8, seen);  // pass 3, position 0: no chain before it, only itself
    EXPECT_EQ(seen, (std::vector<int64_t>{8}));
    visible_rows(4, 1, 3, seen);
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(train_ops, distillation_losses_give_the_gradient_of_what_they_report) {
    cpu::thread_pool pool(2);
    const int64_t n = 3, nv = 7;
    const auto t = random_values(n * nv, 20, 3.0f);
    const std::vector<int32_t> labels{2, -1, 5};
    for (distill_loss kind : {distill_loss::kl, distill_loss::kl_hard, distill_loss::reverse_kl}) {
        auto z = random_values(n * nv, 21, 2.0f);
        std::vector<float> dz(n * nv), scratch(n * nv);
        const float weight = 0.5f, hard_weight = 0.7f;
        auto loss = [&] {
            const loss_sums s =
                logit_loss(kind, t.data(), z.data(), labels.data(), n, nv, weight, hard_weight, scratch.data(), pool);
            return weight * (s.kl + (kind == distill_loss::kl_hard ? hard_weight * s.hard : 0.0));
        };
        logit_loss(kind, t.data(), z.data(), labels.data(), n, nv, weight, hard_weight, dz.data(), pool);
        expect_gradient("dz", z, dz, loss, 21);
    }
}

TEST(train_ops, kl_is_zero_for_equal_distributions_and_positive_otherwise) {
    cpu::thread_pool pool(1);
    const int64_t nv = 5;
    const auto t = random_values(nv, 22, 3.0f);
    std::vector<float> dz(nv);
    EXPECT_NEAR(logit_loss(distill_loss::kl, t.data(), t.data(), nullptr, 1, nv, 1, 0, dz.data(), pool).kl, 0, 1e-6);
    EXPECT_EQ(logit_loss(distill_loss::kl, t.data(), t.data(), nullptr, 1, nv, 1, 0, dz.data(), pool).agree, 1);
    const auto z = random_values(nv, 23, 3.0f);
    EXPECT_GT(logit_loss(distill_loss::kl, t.data(), z.data(), nullptr, 1, nv, 1, 0, dz.data(), pool).kl, 1e-3);
    EXPECT_GT(logit_loss(distill_loss::reverse_kl, t.data(), z.data(), nullptr, 1, nv, 1, 0, dz.data(), pool).kl, 1e-3);
}

TEST(train_ops, smooth_l1_backward_matches_central_differences_in_both_regimes) {
    const int64_t n = 3, dim = 6;
    auto x = random_values(n * dim, 24, 3.0f);
    const auto t = random_values(n * dim, 25, 1.0f);
    std::vector<float> dx(n * dim, 0.0f);
    const double at = smooth_l1(x.data(), t.data(), dx.data(), n, dim, 0.25f);
    int quadratic = 0;
    for (int64_t i = 0; i < n * dim; ++i) quadratic += std::fabs(x[i] - t[i]) < 1.0f ? 1 : 0;
    EXPECT_GT(quadratic, 0);
    EXPECT_LT(quadratic, n * dim);
    EXPECT_GT(at, 0.0);
    auto loss = [&] { return 0.25 * smooth_l1(x.data(), t.data(), nullptr, n, dim, 0.0f); };
    expect_gradient("dx", x, dx, loss, 18, 1e-3f);
}

TEST(train_ops, adamw_minimises_a_quadratic) {
    param w("w", {4});
    w.value = {3.0f, -2.0f, 0.5f, 10.0f};
    const std::vector<float> c{1.0f, 1.0f, -1.0f, 2.0f};
    adam opt({&w}, adam_params{0.05f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.0f});
    for (int step = 0; step < 2000; ++step) {
        for (int i = 0; i < 4; ++i) w.grad[i] = 2.0f * (w.value[i] - c[i]);
        opt.step();
    }
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(w.value[i], c[i], 1e-2) << i;
}

TEST(train_ops, the_schedule_warms_up_then_decays_to_a_tenth) {
    EXPECT_NEAR(lr_schedule(0, 300), 1.0f / 20, 1e-6);
    EXPECT_NEAR(lr_schedule(19, 300), 1.0f, 1e-6);
    EXPECT_NEAR(lr_schedule(299, 300), 0.1f, 1e-3);
    EXPECT_GT(lr_schedule(100, 300), lr_schedule(200, 300));
}

}  // namespace
}  // namespace troupe::train
