// gradient_check: compares an analytic gradient with central finite differences of a scalar loss.
//
// The losses here are float computations summed in double; with a step of 1e-2 the difference quotient is good to
// about 1e-3 (float rounding of the loss over 2·step, plus the O(step²) truncation), so the check allows
// 2e-3 + 2e-2 · |numeric| per element: a missing factor, a wrong sign or a dropped term fails it.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace troupe::train::testing {

// Up to max_checked elements of x (all when fewer, else a seeded sample): d loss / d x[i] ≈ analytic[i].
void expect_gradient(const std::string& what, std::vector<float>& x, const std::vector<float>& analytic,
                     const std::function<double()>& loss, int max_checked = 24, float step = 1e-2f);
// The same on a raw array of n floats.
void expect_gradient(const std::string& what, float* x, int64_t n, const float* analytic,
                     const std::function<double()>& loss, int max_checked = 24, float step = 1e-2f);

// n values uniform in [-scale, scale], seeded.
std::vector<float> random_values(int64_t n, uint64_t seed, float scale = 1.0f);
// Σ a ⊙ b in double.
double dot(const std::vector<float>& a, const std::vector<float>& b);
double dot(const float* a, const float* b, int64_t n);

}  // namespace troupe::train::testing
