// cuBLASLt products with cached plans, and the simple-kernel fallback (cuda_matmul.h).
#include "kernels/cuda/cuda_matmul.h"

#include "kernels/cuda/cuda_kernels.h"

namespace troupe::cuda {
namespace {

constexpr size_t max_cached_plans = 4096;

cudaDataType_t cuda_type(uint32_t type) {
    switch (type) {
        case TROUPE_CUDA_F16:
            return CUDA_R_16F;
        case TROUPE_CUDA_BF16:
            return CUDA_R_16BF;
        default:
            return CUDA_R_32F;
    }
}

#define TROUPE_LT_TRY(expr)                                                                                        \
    do {                                                                                                           \
        const cublasStatus_t troupe_s_ = (expr);                                                                   \
        if (troupe_s_ != CUBLAS_STATUS_SUCCESS) return fail("%s failed: cuBLAS status %d", #expr, (int)troupe_s_); \
    } while (0)

// Builds the plan for one shape; plan.use_lt stays false where cuBLASLt has no algorithm for it.
const char* make_plan(troupe_cuda_context& ctx, uint32_t type, int64_t n_out, int64_t n_in, int32_t n_tokens,
                      bool accumulate, matmul_plan& plan) {
    TROUPE_LT_TRY(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transpose = CUBLAS_OP_T;
    const cublasOperation_t keep = CUBLAS_OP_N;
    TROUPE_LT_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose));
    TROUPE_LT_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep));
    const cudaDataType_t t = cuda_type(type);
    TROUPE_LT_TRY(cublasLtMatrixLayoutCreate(&plan.a, t, n_in, n_out, n_in));
    TROUPE_LT_TRY(cublasLtMatrixLayoutCreate(&plan.b, t, n_in, n_tokens, n_in));
    TROUPE_LT_TRY(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, n_out, n_tokens, n_out));

    cublasLtMatmulPreference_t pref = nullptr;
    TROUPE_LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = ctx.workspace.size();
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t found{};
    int n_found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(ctx.lt, plan.op, plan.a, plan.b, plan.c, plan.c, pref, 1, &found, &n_found);
    cublasLtMatmulPreferenceDestroy(pref);
    plan.use_lt = st == CUBLAS_STATUS_SUCCESS && n_found > 0;
    if (plan.use_lt) plan.algo = found.algo;
    (void)accumulate;  // beta is passed per call; the key keeps accumulating plans apart for the heuristic's sake
    return nullptr;
}

// Whether decode's GEMV makes this product (launch_gemv), which reads the activations in F32 and rounds them itself.
bool by_gemv(const troupe_cuda_context& ctx, matmul_impl impl, int32_t n_tokens) {
    return impl == matmul_impl::cublaslt && n_tokens <= gemv_max_tokens && ctx.gemv;
}

// x [n_tokens, n_in] rounded to the 16-bit `type` in ctx.act16, for cuBLASLt.
const char* round_activations(troupe_cuda_context& ctx, uint32_t type, const float* x, int32_t n_tokens, int64_t n_in,
                              const void** out) {
    const size_t n = static_cast<size_t>(n_tokens) * n_in;
    TROUPE_CUDA_TRY_STATUS(ctx.act16.grow(n * 2, "the rounded activations"));
    launch_convert(x, static_cast<dtype>(type), ctx.act16.data(), static_cast<int64_t>(n), ctx.streams[0]);
    *out = ctx.act16.data();
    return nullptr;
}

// matmul with, where rounded is not null, x already rounded to w's type in ctx.act16 (matmul_group).
const char* matmul_from(troupe_cuda_context& ctx, const device_matrix& w, const float* x, const void* rounded, float* y,
                        int32_t n_tokens, bool accumulate, matmul_impl impl) {
    if (n_tokens == 0 || w.n_out == 0) return nullptr;
    cudaStream_t stream = ctx.streams[0];
    if (w.type == TROUPE_CUDA_EXTERNAL) {
        // A plugin's weight: its own kernel, on this lane's stream; accumulated through a buffer of this lane.
        const auto* ext = static_cast<const troupe_cuda_external_matrix*>(w.data);
        float* out = y;
        if (accumulate) {
            TROUPE_CUDA_TRY_STATUS(ctx.external_out.grow(static_cast<size_t>(n_tokens) * w.n_out * sizeof(float),
                                                         "a plugin product's output"));
            out = ctx.external_out.as<float>();
        }
        if (const char* m = ext->matmul(ext->ctx, x, out, n_tokens, stream))
            return fail("plugin matmul [%lld, %lld] x %d tokens: %s", static_cast<long long>(w.n_out),
                        static_cast<long long>(w.n_in), n_tokens, m);
        if (accumulate) launch_add(y, out, static_cast<int64_t>(n_tokens) * w.n_out, stream);
        TROUPE_CUDA_TRY(cudaGetLastError());
        return nullptr;
    }
    if (by_gemv(ctx, impl, n_tokens)) {
        // Decode: the weights read once, the activations rounded as they are read (launch_gemv); `rounded` unused.
        launch_gemv(static_cast<dtype>(w.type), w.data, w.n_in, w.n_out, x, y, n_tokens, accumulate, stream);
        TROUPE_CUDA_TRY(cudaGetLastError());
        return nullptr;
    }
    const auto simple = [&]() -> const char* {
        launch_matmul_simple(static_cast<dtype>(w.type), w.data, w.n_in, w.n_out, x, y, n_tokens, accumulate, stream);
        TROUPE_CUDA_TRY(cudaGetLastError());
        return nullptr;
    };
    if (impl == matmul_impl::simple) return simple();

    const matmul_key key{w.type, w.n_out, w.n_in, n_tokens, accumulate};
    auto it = ctx.plans.find(key);
    if (it == ctx.plans.end()) {
        if (ctx.plans.size() >= max_cached_plans) ctx.plans.clear();
        auto plan = std::make_unique<matmul_plan>();
        TROUPE_CUDA_TRY_STATUS(make_plan(ctx, w.type, w.n_out, w.n_in, n_tokens, accumulate, *plan));
        it = ctx.plans.emplace(key, std::move(plan)).first;
    }
    const matmul_plan& plan = *it->second;
    if (!plan.use_lt) return simple();

    const void* b = rounded != nullptr ? rounded : x;
    if (w.type != TROUPE_CUDA_F32 && rounded == nullptr)
        TROUPE_CUDA_TRY_STATUS(round_activations(ctx, w.type, x, n_tokens, w.n_in, &b));
    const float alpha = 1.0f;
    const float beta = accumulate ? 1.0f : 0.0f;
    const cublasStatus_t st = cublasLtMatmul(ctx.lt, plan.op, &alpha, w.data, plan.a, b, plan.b, &beta, y, plan.c, y,
                                             plan.c, &plan.algo, ctx.workspace.data(), ctx.workspace.size(), stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        return fail("cublasLtMatmul [%d x %lld] x [%lld x %lld]^T (%s) failed: cuBLAS status %d", n_tokens,
                    static_cast<long long>(w.n_in), static_cast<long long>(w.n_out), static_cast<long long>(w.n_in),
                    type_name(w.type), static_cast<int>(st));
    return nullptr;
}

}  // namespace

const char* matmul(troupe_cuda_context& ctx, const device_matrix& w, const float* x, float* y, int32_t n_tokens,
                   bool accumulate, matmul_impl impl) {
    return matmul_from(ctx, w, x, nullptr, y, n_tokens, accumulate, impl);
}

namespace {

// Whether the products can share one launch_gemv_parts: decode-sized, the backend's own weights of one type, one n_in.
bool gemv_together(const troupe_cuda_context& ctx, std::initializer_list<matmul_into> products, int32_t n_tokens) {
    if (!by_gemv(ctx, matmul_impl::cublaslt, n_tokens) || products.size() > gemv_max_parts) return false;
    const device_matrix& first = *products.begin()->w;
    for (const matmul_into& p : products) {
        if (p.w->type == TROUPE_CUDA_EXTERNAL || p.w->type != first.type || p.w->n_in != first.n_in) return false;
    }
    return true;
}

const char* gemv_group(troupe_cuda_context& ctx, std::initializer_list<matmul_into> products, const float* x,
                       int32_t n_tokens, glu_kind glu) {
    gemv_part parts[gemv_max_parts];
    int32_t n = 0;
    for (const matmul_into& p : products) parts[n++] = gemv_part{p.w->data, p.y, p.w->n_out};
    const device_matrix& first = *products.begin()->w;
    launch_gemv_parts(static_cast<dtype>(first.type), first.n_in, x, n_tokens, parts, n, glu, false, ctx.streams[0]);
    TROUPE_CUDA_TRY(cudaGetLastError());
    return nullptr;
}

}  // namespace

const char* matmul_group(troupe_cuda_context& ctx, std::initializer_list<matmul_into> products, const float* x,
                         int32_t n_tokens) {
    if (n_tokens == 0 || products.size() == 0) return nullptr;
    if (gemv_together(ctx, products, n_tokens)) return gemv_group(ctx, products, x, n_tokens, glu_kind::none);
    // One rounding serves all only where every weight is the same 16-bit type (act16 holds one rounding at a time).
    const uint32_t type = products.begin()->w->type;
    bool shared = type == TROUPE_CUDA_F16 || type == TROUPE_CUDA_BF16;
    for (const matmul_into& p : products) shared = shared && p.w->type == type;
    const void* rounded = nullptr;
    if (shared && products.size() > 1 && !by_gemv(ctx, matmul_impl::cublaslt, n_tokens))
        TROUPE_CUDA_TRY_STATUS(round_activations(ctx, type, x, n_tokens, products.begin()->w->n_in, &rounded));
    for (const matmul_into& p : products) {
        TROUPE_CUDA_TRY_STATUS(matmul_from(ctx, *p.w, x, rounded, p.y, n_tokens, false, matmul_impl::cublaslt));
    }
    return nullptr;
}

const char* matmul_glu(troupe_cuda_context& ctx, const device_matrix& gate, const device_matrix& up, const float* x,
                       float* out, float* up_out, int32_t n_tokens, glu_kind glu) {
    if (n_tokens == 0) return nullptr;
    if (gate.n_out == up.n_out && gemv_together(ctx, {{&gate, out}, {&up, up_out}}, n_tokens))
        return gemv_group(ctx, {{&gate, out}, {&up, up_out}}, x, n_tokens, glu);
    TROUPE_CUDA_TRY_STATUS(matmul_group(ctx, {{&gate, out}, {&up, up_out}}, x, n_tokens));
    const int64_t n = static_cast<int64_t>(n_tokens) * gate.n_out;
    if (glu == glu_kind::gelu_tanh) {
        launch_geglu(out, up_out, out, n, ctx.streams[0]);
    } else {
        launch_swiglu(out, up_out, out, n, ctx.streams[0]);
    }
    TROUPE_CUDA_TRY(cudaGetLastError());
    return nullptr;
}

}  // namespace troupe::cuda
