// Matmuls on real GGUF tensors (../shared models: stories260K in F32/F16/Q8_0/Q4_0 and rand10M in
// F16/Q8_0/Q4_0/Q4_K_M/Q6_K, whose scales and mins come from llama.cpp's quantizers, not ours), optimized
// vs reference at every level, 1 and 33 tokens. Same tolerance as test_matmul.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "core/gguf/gguf_file.h"
#include "kernels/cpu/matmul.h"
#include "kernels/ref/ops.h"
#include "kernels/ref/quants.h"
#include "ops_test_util.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

void check_model(const std::string& path, int* n_checked) {
    auto file = gguf::gguf_file::open(path);
    ASSERT_TRUE(file.ok()) << file.message();
    cpu::thread_pool pool(2);
    for (const gguf::tensor_info& t : (*file)->tensors()) {
        if (t.dims.size() != 2 || !matmul_supports(t.type)) continue;
        if (t.name.find("blk.0.") != 0 && t.name != "output.weight") continue;
        const int64_t n_in = t.dims[0];
        const int64_t n_out = std::min<int64_t>(t.dims[1], 1000);  // output.weight: the first 1000 rows
        const matmul_weight w{t.type, t.data, n_in, n_out, row_bytes(t.type, n_in)};
        std::vector<float> deq(n_out * n_in);
        for (int64_t r = 0; r < n_out; ++r) {
            ref::dequantize_row(t.type, t.data + r * w.row_stride, deq.data() + r * n_in, n_in);
        }
        for (int64_t n_tokens : {1, 33}) {
            SCOPED_TRACE(path + ": " + t.name + " (" + std::string(traits(t.type).name) + ") n_tokens " +
                         std::to_string(n_tokens));
            const auto x = testing::random_floats(n_tokens * n_in, 3);
            std::vector<float> y_ref(n_tokens * n_out), y(n_tokens * n_out);
            ref::matmul(w, x.data(), y_ref.data(), n_tokens);
            for (auto level : cpu::available_levels()) {
                testing::scoped_level scope(level);
                cpu::matmul(w, x.data(), y.data(), n_tokens, pool);
                for (int64_t t_i = 0; t_i < n_tokens; ++t_i) {
                    for (int64_t r = 0; r < n_out; ++r) {
                        double bound = 0;
                        for (int64_t k = 0; k < n_in; ++k) bound += std::fabs(deq[r * n_in + k] * x[t_i * n_in + k]);
                        const size_t i = t_i * n_out + r;
                        ASSERT_TRUE(std::isfinite(y[i]));
                        ASSERT_LE(std::fabs(y[i] - y_ref[i]), 4e-6 * bound + 1e-30)
                            << testing::level_name(level) << " row " << r << ": " << y[i] << " vs " << y_ref[i];
                    }
                }
            }
        }
        ++*n_checked;
    }
}

class real_models : public ::testing::TestWithParam<const char*> {};

TEST_P(real_models, optimized_matmuls_match_the_reference_on_the_models_tensors) {
    TROUPE_REQUIRE_SHARED(path, GetParam());
    int n_checked = 0;
    check_model(path, &n_checked);
    EXPECT_GT(n_checked, 3) << "too few matmul tensors found in " << path;
}

INSTANTIATE_TEST_SUITE_P(shared, real_models,
                         ::testing::Values("models/stories260K.gguf", "models/stories260K-F16.gguf",
                                           "models/stories260K-Q8_0.gguf", "models/stories260K-Q4_0.gguf",
                                           "models/rand10M-F16.gguf", "models/rand10M-Q8_0.gguf",
                                           "models/rand10M-Q4_0.gguf", "models/rand10M-Q4_K_M.gguf",
                                           "models/rand10M-Q6_K.gguf"),
                         [](const auto& info) {
                             std::string s = info.param;
                             s = s.substr(s.find('/') + 1);
                             s = s.substr(0, s.find(".gguf"));
                             for (char& c : s) {
                                 if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                             }
                             return s;
                         });

}  // namespace
}  // namespace troupe
