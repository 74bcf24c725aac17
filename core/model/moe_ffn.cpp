#include "core/model/moe_ffn.h"

#include <algorithm>
#include <cstring>

#include "core/model/cpu_ops.h"

namespace troupe {

result<moe_ffn> moe_ffn::make(const moe_params& p, const moe_layer_weights& w, int32_t dim, const std::string& name,
                              const make_linear_fn& make_linear, std::shared_ptr<moe_workspace> workspace) {
    moe_ffn m;
    m.p_ = p;
    m.dim_ = dim;
    m.ws_ = workspace ? std::move(workspace) : std::make_shared<moe_workspace>();
    m.probs_bias_ = w.probs_bias;
    if (status st = make_linear(w.router, name + "ffn_gate_inp.weight", m.router_); !st.ok()) return st.err();
    auto fuse = [](expert& x) {
        const linear* parts[] = {&x.gate, &x.up};
        x.gate_up = linear::concatenated(parts);
    };
    m.experts_.resize(p.n_experts);
    for (int32_t e = 0; e < p.n_experts; ++e) {
        expert& x = m.experts_[e];
        const std::string which = ".weight (expert " + std::to_string(e) + ")";
        for (auto [stacked, tensor, dst] :
             {std::tuple{&w.gate_exps, "ffn_gate_exps", &x.gate}, std::tuple{&w.up_exps, "ffn_up_exps", &x.up},
              std::tuple{&w.down_exps, "ffn_down_exps", &x.down}}) {
            const weight_view one = expert_matrix(*stacked, p.n_experts, e);
            if (status st = make_linear(one, name + tensor + which, *dst); !st.ok()) return st.err();
        }
        fuse(x);
    }
    if (p.n_shared > 0) {
        expert x;
        for (auto [view, tensor, dst] :
             {std::tuple{&w.gate_shexp, "ffn_gate_shexp", &x.gate}, std::tuple{&w.up_shexp, "ffn_up_shexp", &x.up},
              std::tuple{&w.down_shexp, "ffn_down_shexp", &x.down}}) {
            if (status st = make_linear(*view, name + tensor + ".weight", *dst); !st.ok()) return st.err();
        }
        fuse(x);
        m.shared_ = std::move(x);
    }
    return m;
}

void moe_ffn::reserve(size_t n) {
    moe_workspace& ws = *ws_;
    const size_t pairs = n * p_.n_used, rows = std::max(pairs, n);
    const size_t ffn = std::max(p_.expert_ffn, p_.shared_ffn());
    if (ws.logits.size() < n * p_.n_experts) ws.logits.resize(n * p_.n_experts);
    ws.experts.resize(pairs);
    ws.weights.resize(pairs);
    if (ws.xg.size() < pairs * dim_) ws.xg.resize(pairs * dim_);
    if (ws.yg.size() < rows * dim_) ws.yg.resize(rows * dim_);
    if (ws.gate.size() < rows * ffn) {
        ws.gate.resize(rows * ffn);
        ws.up.resize(rows * ffn);
    }
    if (ws.gate_up.size() < k_max_fused_tokens * 2 * ffn) ws.gate_up.resize(k_max_fused_tokens * 2 * ffn);
}

status moe_ffn::run_expert(const expert& e, int32_t ffn, const float* x, float* y, size_t n,
                           const compute_context& ctx) {
    moe_workspace& ws = *ws_;
    const size_t f = ffn;
    const float* hidden = ws.gate.data();  // [n, ffn]
    if (e.gate_up && n <= k_max_fused_tokens) {
        float* gu = ws.gate_up.data();  // [n, 2 ffn]: each row's gate, then its up
        if (status st = e.gate_up->forward(x, gu, static_cast<int64_t>(n), ctx); !st.ok()) return st;
        for (size_t t = 0; t < n; ++t) swiglu_rows(gu + t * 2 * f, gu + t * 2 * f + f, f);
        if (n == 1) {
            hidden = gu;
        } else {
            for (size_t t = 0; t < n; ++t) std::copy_n(gu + t * 2 * f, f, ws.gate.data() + t * f);
        }
    } else {
        if (status st = e.gate.forward(x, ws.gate.data(), static_cast<int64_t>(n), ctx); !st.ok()) return st;
        if (status st = e.up.forward(x, ws.up.data(), static_cast<int64_t>(n), ctx); !st.ok()) return st;
        swiglu_rows(ws.gate.data(), ws.up.data(), n * f);
    }
    return e.down.forward(hidden, y, static_cast<int64_t>(n), ctx);
}

namespace {

// fn(begin, end) over [0, n): on the pool where the work is worth a job, else inline.
template <class F>
void rows_loop(const compute_context& ctx, size_t n, size_t row_floats, F&& fn) {
    if (ctx.pool && n * row_floats >= 32 * 1024) {
        ctx.pool->parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e) { fn(b, e); });
    } else {
        fn(0, static_cast<int64_t>(n));
    }
}

}  // namespace

status moe_ffn::forward(const float* x, float* y, size_t n, const compute_context& ctx) {
    if (n == 0) return {};
    reserve(n);
    moe_workspace& ws = *ws_;
    const int32_t k = p_.n_used;
    const size_t dim = dim_, pairs = n * k;
    if (status st = router_.forward(x, ws.logits.data(), static_cast<int64_t>(n), ctx); !st.ok()) return st;
    route_tokens(ws.logits.data(), n, p_, probs_bias_, ws.experts.data(), ws.weights.data());
    ws.groups.build(ws.experts.data(), n, k, p_.n_experts);
    const expert_groups& g = ws.groups;

    float* yg = ws.yg.data();  // [pairs, dim] in expert order
    if (n == 1) {              // every selected expert multiplies x itself: nothing to gather
        for (int32_t s = 0; s < k; ++s) {
            const int32_t e = ws.experts[s];
            float* out = yg + static_cast<size_t>(g.row_of[s]) * dim;
            if (status st = run_expert(experts_[e], p_.expert_ffn, x, out, 1, ctx); !st.ok()) return st;
        }
    } else {
        float* xg = ws.xg.data();  // [pairs, dim]
        rows_loop(ctx, pairs, dim, [&](int64_t b, int64_t e) {
            for (int64_t r = b; r < e; ++r)
                std::copy_n(x + static_cast<size_t>(g.token_of[r]) * dim, dim, xg + r * dim);
        });
        for (int32_t e = 0; e < p_.n_experts; ++e) {
            const int32_t c = g.count(e);
            if (c == 0) continue;
            const size_t at = static_cast<size_t>(g.offsets[e]) * dim;
            if (status st = run_expert(experts_[e], p_.expert_ffn, xg + at, yg + at, c, ctx); !st.ok()) return st;
        }
    }
    // y[t] = Σ_slot w · Y(row of (t, slot)), slots in router order.
    rows_loop(ctx, n, dim * k, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            float* out = y + t * dim;
            for (int32_t s = 0; s < k; ++s) {
                const float w = ws.weights[t * k + s];
                const float* src = yg + static_cast<size_t>(g.row_of[t * k + s]) * dim;
                if (s == 0) {
                    for (size_t i = 0; i < dim; ++i) out[i] = w * src[i];
                } else {
                    for (size_t i = 0; i < dim; ++i) out[i] += w * src[i];
                }
            }
        }
    });
    if (shared_) {
        float* sy = yg;  // [n, dim]: the routed rows are summed into y already
        if (status st = run_expert(*shared_, p_.shared_ffn(), x, sy, n, ctx); !st.ok()) return st;
        add_rows(y, sy, n * dim);
    }
    return {};
}

size_t moe_ffn::active_bytes_per_token() const {
    size_t experts = 0;
    for (const expert& e : experts_) experts += e.gate.n_bytes() + e.up.n_bytes() + e.down.n_bytes();
    size_t bytes = router_.n_bytes() + experts * p_.n_used / std::max<size_t>(1, experts_.size());
    if (shared_) bytes += shared_->gate.n_bytes() + shared_->up.n_bytes() + shared_->down.n_bytes();
    return bytes;
}

int64_t moe_ffn::active_macs_per_token(const std::function<int64_t(const linear&)>& macs_of) const {
    auto macs = [&](const linear& l) { return macs_of ? macs_of(l) : l.n_in() * l.n_out(); };
    int64_t m = macs(router_);
    if (!experts_.empty()) {
        const expert& e = experts_.front();
        m += p_.n_used * (macs(e.gate) + macs(e.up) + macs(e.down));
    }
    if (shared_) m += macs(shared_->gate) + macs(shared_->up) + macs(shared_->down);
    return m;
}

std::vector<linear*> moe_ffn::weights_in_step_order() {
    std::vector<linear*> order{&router_};
    auto add = [&](expert& e) {
        if (e.gate_up) {
            order.push_back(&*e.gate_up);
        } else {
            order.insert(order.end(), {&e.gate, &e.up});
        }
        order.push_back(&e.down);
    };
    for (expert& e : experts_) add(e);
    if (shared_) add(*shared_);
    return order;
}

void moe_ffn::parts_from_groups() {
    auto views = [](expert& e) {
        if (!e.gate_up) return;
        const int64_t f = e.gate.n_out();
        e.gate = e.gate_up->rows(0, f);
        e.up = e.gate_up->rows(f, 2 * f);
    };
    for (expert& e : experts_) views(e);
    if (shared_) views(*shared_);
}

}  // namespace troupe
