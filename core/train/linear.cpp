#include "core/train/linear.h"

#include <vector>

#include "core/train/gemm.h"

namespace troupe::train {

void linear_forward(const float* x, const float* w, const float* b, float* y, int64_t n, int64_t in, int64_t out,
                    cpu::thread_pool& pool) {
    gemm_nt(x, w, y, n, out, in, pool);
    if (b == nullptr) return;
    for (int64_t r = 0; r < n; ++r) {
        float* yr = y + r * out;
        for (int64_t o = 0; o < out; ++o) yr[o] += b[o];
    }
}

void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, int64_t n,
                     int64_t in, int64_t out, cpu::thread_pool& pool) {
    if (dx != nullptr) {
        std::vector<float> wt(static_cast<size_t>(in * out));  // [in, out]
        transpose(w, wt.data(), out, in, &pool);
        gemm_nt_acc(dy, wt.data(), dx, n, in, out, pool);
    }
    if (dw != nullptr) {
        std::vector<float> dyt(static_cast<size_t>(out * n));  // [out, n]
        std::vector<float> xt(static_cast<size_t>(in * n));    // [in, n]
        transpose(dy, dyt.data(), n, out, &pool);
        transpose(x, xt.data(), n, in, &pool);
        gemm_nt_acc(dyt.data(), xt.data(), dw, out, in, n, pool);
    }
    if (db != nullptr) {
        for (int64_t r = 0; r < n; ++r) {
            const float* dyr = dy + r * out;
            for (int64_t o = 0; o < out; ++o) db[o] += dyr[o];
        }
    }
}

}  // namespace troupe::train
