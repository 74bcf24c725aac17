// cpu::matmul_for_training (core/train's products: the packed float GEMM where the level has one) against a double
// precision reference at every dispatch level this CPU has, on shapes around its micro-tile (14 tokens x 32 rows)
// and k block (256), with a padded weight row stride, and at a k and a token count that the levels without it cut
// into cache blocks; 1 and 2 threads.
//
// Tolerance: float sums in another order than the reference's, |y - y_ref| <= 4e-6 * sum_k |w_k x_k| + 1e-30.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/matmul.h"
#include "ops_test_util.h"

namespace troupe {
namespace {

using testing::random_floats;
using testing::scoped_level;

TEST(matmul_for_training, equals_a_double_precision_product_at_every_level_shape_and_thread_count) {
    cpu::thread_pool one(1), two(2);
    uint32_t seed = 5;
    for (cpu::dispatch_level level : cpu::available_levels()) {
        scoped_level scope(level);
        // 4100: three k chunks and two token blocks where the level has no packed GEMM (matmul_in_cache_blocks).
        for (int64_t n_in : {16, 250, 256, 600, 4100}) {
            for (int64_t n_out : {1, 31, 32, 33, 100}) {
                if (n_in == 4100 && n_out > 33) continue;
                const int64_t stride = n_in + (n_out == 33 ? 7 : 0);  // floats per weight row
                const auto w_data = random_floats(n_out * stride, seed++);
                const matmul_weight w{ggml_type::f32, w_data.data(), n_in, n_out,
                                      static_cast<size_t>(stride) * sizeof(float)};
                for (int64_t n_tokens : {1, 13, 14, 15, 29, 64, 100}) {
                    SCOPED_TRACE("level " + std::to_string(static_cast<int>(level)) + " n_in " + std::to_string(n_in) +
                                 " n_out " + std::to_string(n_out) + " n_tokens " + std::to_string(n_tokens));
                    const auto x = random_floats(n_tokens * n_in, seed++);
                    for (cpu::thread_pool* pool : {&one, &two}) {
                        std::vector<float> y(static_cast<size_t>(n_tokens * n_out), NAN);
                        cpu::matmul_for_training(w, x.data(), y.data(), n_tokens, *pool);
                        for (int64_t t = 0; t < n_tokens; ++t) {
                            for (int64_t r = 0; r < n_out; ++r) {
                                double sum = 0, magnitude = 0;
                                for (int64_t k = 0; k < n_in; ++k) {
                                    const double p = static_cast<double>(w_data[r * stride + k]) * x[t * n_in + k];
                                    sum += p;
                                    magnitude += std::fabs(p);
                                }
                                ASSERT_NEAR(y[t * n_out + r], sum, 4e-6 * magnitude + 1e-30)
                                    << "token " << t << " row " << r;
                            }
                        }
                    }
                }
            }
        }
    }
}

}  // namespace
}  // namespace troupe
