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

void zero_grads(std::span<param* const> params) {
    for (param* p : params) std::fill(p->grad.begin(), p->grad.end(), 0.0f);
}

double grad_norm(std::span<param* const> params) {
    double s = 0;
    for (const param* p : params) {
        for (float g : p->grad) s += static_cast<double>(g) * g;
    }
    return std::sqrt(s);
}

}  // namespace troupe::train
