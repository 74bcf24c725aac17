#include "core/train/param.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

namespace troupe::train {

param::param(std::string n, std::vector<int64_t> d) : name(std::move(n)), dims(std::move(d)) {
    const int64_t count = std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
    value.assign(static_cast<size_t>(count), 0.0f);
    grad.assign(static_cast<size_t>(count), 0.0f);
}

namespace {

// The chunks for_param_chunks cuts p into.
int64_t n_chunks_of(const param& p) {
    return (p.size() + param_chunk - 1) / param_chunk;
}

}  // namespace

void for_param_chunks(std::span<param* const> params, cpu::thread_pool* pool,
                      const std::function<void(size_t, int64_t, int64_t, int64_t)>& f) {
    struct chunk {
        size_t k;
        int64_t begin, end;
    };
    std::vector<chunk> chunks;
    for (size_t k = 0; k < params.size(); ++k) {
        const int64_t n = params[k]->size();
        for (int64_t i = 0; i < n_chunks_of(*params[k]); ++i) {
            chunks.push_back({k, i * param_chunk, std::min(n, (i + 1) * param_chunk)});
        }
    }
    const auto run = [&](int64_t first, int64_t last) {
        for (int64_t c = first; c < last; ++c) f(chunks[c].k, chunks[c].begin, chunks[c].end, c);
    };
    const auto n = static_cast<int64_t>(chunks.size());
    if (pool != nullptr) {
        pool->parallel_for(n, run);
    } else {
        run(0, n);
    }
}

void zero_grads(std::span<param* const> params, cpu::thread_pool* pool) {
    for_param_chunks(params, pool, [&](size_t k, int64_t b, int64_t e, int64_t) {
        std::fill(params[k]->grad.begin() + b, params[k]->grad.begin() + e, 0.0f);
    });
}

double grad_norm(std::span<param* const> params, cpu::thread_pool* pool) {
    int64_t n_chunks = 0;
    for (const param* p : params) n_chunks += n_chunks_of(*p);
    std::vector<double> partial(static_cast<size_t>(n_chunks), 0.0);
    for_param_chunks(params, pool, [&](size_t k, int64_t b, int64_t e, int64_t c) {
        const float* g = params[k]->grad.data();
        double s = 0;
        for (int64_t i = b; i < e; ++i) s += static_cast<double>(g[i]) * g[i];
        partial[c] = s;
    });
    double s = 0;
    for (double x : partial) s += x;
    return std::sqrt(s);
}

}  // namespace troupe::train
