#include "tests/train/gradient_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace troupe::train::testing {

void expect_gradient(const std::string& what, std::vector<float>& x, const std::vector<float>& analytic,
                     const std::function<double()>& loss, int max_checked, float step) {
    ASSERT_EQ(x.size(), analytic.size()) << what;
    expect_gradient(what, x.data(), static_cast<int64_t>(x.size()), analytic.data(), loss, max_checked, step);
}

void expect_gradient(const std::string& what, float* x, int64_t n, const float* analytic,
                     const std::function<double()>& loss, int max_checked, float step) {
    std::vector<int64_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::mt19937_64 rng(static_cast<uint64_t>(n) * 7919 + what.size());
    std::shuffle(idx.begin(), idx.end(), rng);
    if (static_cast<int64_t>(idx.size()) > max_checked) idx.resize(max_checked);
    int failures = 0;
    for (int64_t i : idx) {
        const float keep = x[i];
        x[i] = keep + step;
        const double up = loss();
        x[i] = keep - step;
        const double down = loss();
        x[i] = keep;
        const double numeric = (up - down) / (2.0 * step);
        const double tol = 2e-3 + 2e-2 * std::fabs(numeric);
        if (std::fabs(analytic[i] - numeric) > tol && ++failures <= 5) {
            ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << ", central difference " << numeric;
        }
    }
    EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << idx.size() << " elements differ";
}

std::vector<float> random_values(int64_t n, uint64_t seed, float scale) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

double dot(const float* a, const float* b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
    return dot(a.data(), b.data(), static_cast<int64_t>(std::min(a.size(), b.size())));
}

}  // namespace troupe::train::testing
