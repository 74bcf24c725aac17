#include "core/model/cpu_ops.h"

#include <string>

#include "core/result.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/ref/ops.h"
#include "kernels/ref/quants.h"

namespace troupe {

void embed_rows(const weight_view& emb, const int32_t* ids, size_t n, float* out) {
    if (!matmul_supports(emb.type)) {
        // A type only a quant plugin multiplies (Q4_1, W4_G*): its rows through the reference dequantization.
        for (size_t i = 0; i < n; ++i) {
            TROUPE_ASSERT(ids[i] >= 0 && ids[i] < emb.n_out, "embedding: token id " + std::to_string(ids[i]) +
                                                                 " is outside [0, " + std::to_string(emb.n_out) + ")");
            ref::dequantize_row(emb.type, static_cast<const uint8_t*>(emb.data) + ids[i] * emb.row_stride,
                                out + i * emb.n_in, emb.n_in);
        }
        return;
    }
    const matmul_weight w{emb.type, emb.data, emb.n_in, emb.n_out, emb.row_stride};
    cpu::embedding(w, ids, static_cast<int64_t>(n), out);
}

void rmsnorm_rows(const float* x, const float* w, float* y, size_t n, int32_t dim, float eps) {
    cpu::rmsnorm(x, w, y, static_cast<int64_t>(n), dim, eps);
}

namespace {

rope_params rope_params_of(const llama_hparams& hp) {
    return rope_params{hp.head_dim, hp.rope_dims, hp.rope == rope_mode::neox, hp.rope_base, hp.rope_scale, nullptr};
}

}  // namespace

void rope_angles_rows(const int32_t* positions, size_t n, const llama_hparams& hp, float* cs) {
    cpu::rope_angles(positions, static_cast<int64_t>(n), rope_params_of(hp), cs);
}

void rope_rows(float* x, const float* cs, size_t n, int32_t n_heads, const llama_hparams& hp) {
    cpu::rope_apply(x, static_cast<int64_t>(n), n_heads, cs, rope_params_of(hp));
}

void swiglu_rows(float* gate, const float* up, size_t n) {
    cpu::swiglu(gate, up, gate, static_cast<int64_t>(n));
}

void add_rows(float* x, const float* y, size_t n) {
    cpu::add(x, y, x, static_cast<int64_t>(n));
}

}  // namespace troupe
