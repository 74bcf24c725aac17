#include "core/model/cpu_ops.h"

#include "kernels/cpu/row_ops.h"

namespace troupe {

void embed_rows(const weight_view& emb, const int32_t* ids, size_t n, float* out) {
    const matmul_weight w{emb.type, emb.data, emb.n_in, emb.n_out, emb.row_stride};
    cpu::embedding(w, ids, static_cast<int64_t>(n), out);
}

void rmsnorm_rows(const float* x, const float* w, float* y, size_t n, int32_t dim, float eps) {
    cpu::rmsnorm(x, w, y, static_cast<int64_t>(n), dim, eps);
}

void rope_rows(float* x, const int32_t* positions, size_t n, int32_t n_heads, const llama_hparams& hp) {
    const rope_params p{hp.head_dim, hp.rope_dims, hp.rope == rope_mode::neox, hp.rope_base, hp.rope_scale, nullptr};
    cpu::rope(x, static_cast<int64_t>(n), n_heads, positions, p);
}

void swiglu_rows(float* gate, const float* up, size_t n) {
    cpu::swiglu(gate, up, gate, static_cast<int64_t>(n));
}

void add_rows(float* x, const float* y, size_t n) {
    cpu::add(x, y, x, static_cast<int64_t>(n));
}

}  // namespace troupe
