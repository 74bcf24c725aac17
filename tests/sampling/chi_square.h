// chi_square: Pearson's goodness-of-fit test of observed counts against expected counts, for the tests that check
// that speculative sampling emits exactly the target's distribution. Bins whose expected count is below
// min_expected are pooled into one bin (and that bin into the smallest other one while it is still below), the
// usual condition for the chi-square approximation. The p-value is the upper tail of the chi-square distribution,
// Q(dof / 2, statistic / 2) with Q the regularized upper incomplete gamma function (series below a + 1, Lentz's
// continued fraction above).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace troupe::testing {

// Regularized upper incomplete gamma function Q(a, x) = Γ(a, x) / Γ(a), a > 0, x >= 0.
inline double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    const double log_prefix = a * std::log(x) - x - std::lgamma(a);
    if (x < a + 1) {
        // P(a, x) = x^a e^-x / Γ(a + 1) * sum_n x^n / ((a + 1) ... (a + n))
        double term = 1.0 / a;
        double sum = term;
        for (int n = 1; n < 100000; ++n) {
            term *= x / (a + n);
            sum += term;
            if (std::fabs(term) < std::fabs(sum) * 1e-15) break;
        }
        return std::max(0.0, 1.0 - sum * std::exp(log_prefix));
    }
    // Q(a, x) = x^a e^-x / Γ(a) * 1 / (x + 1 - a - 1(1 - a) / (x + 3 - a - ...)) by modified Lentz.
    constexpr double tiny = 1e-300;
    double b = x + 1 - a;
    double c = 1 / tiny;
    double d = 1 / b;
    double h = d;
    for (int i = 1; i < 100000; ++i) {
        const double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (std::fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (std::fabs(c) < tiny) c = tiny;
        d = 1 / d;
        const double delta = d * c;
        h *= delta;
        if (std::fabs(delta - 1) < 1e-15) break;
    }
    return std::exp(log_prefix) * h;
}

struct chi_square_result {
    double statistic = 0;
    int32_t dof = 0;
    double p_value = 1;
    int32_t n_bins = 0;  // after pooling
};

// observed[i] and expected[i] count the same outcome; the expected counts sum to the number of draws.
inline chi_square_result chi_square(std::span<const double> observed, std::span<const double> expected,
                                    double min_expected = 5) {
    std::vector<std::pair<double, double>> bins;  // (expected, observed)
    std::pair<double, double> pooled{0, 0};
    for (size_t i = 0; i < expected.size(); ++i) {
        if (expected[i] >= min_expected) {
            bins.emplace_back(expected[i], observed[i]);
        } else {
            pooled.first += expected[i];
            pooled.second += observed[i];
        }
    }
    std::sort(bins.begin(), bins.end());
    while (pooled.first > 0 && pooled.first < min_expected && !bins.empty()) {
        pooled.first += bins.front().first;
        pooled.second += bins.front().second;
        bins.erase(bins.begin());
    }
    if (pooled.first > 0 || pooled.second > 0) bins.push_back(pooled);
    chi_square_result r;
    r.n_bins = static_cast<int32_t>(bins.size());
    for (const auto& [e, o] : bins) {
        if (e > 0) {
            r.statistic += (o - e) * (o - e) / e;
        } else if (o > 0) {
            r.statistic = INFINITY;  // an outcome that cannot happen happened
        }
    }
    r.dof = std::max(1, r.n_bins - 1);
    r.p_value = std::isinf(r.statistic) ? 0.0 : gamma_q(r.dof / 2.0, r.statistic / 2.0);
    return r;
}

}  // namespace troupe::testing
