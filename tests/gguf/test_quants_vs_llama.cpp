// Our reference quantizers against llama.cpp's on the same weights: quantize the F16 rand10M tensors
// with kernels/ref and compare the round-trip error with that of the tensors llama.cpp quantized.
#include <gtest/gtest.h>

#include <cmath>

#include "core/gguf/gguf_file.h"
#include "kernels/ref/quants.h"
#include "tests/common/shared_data.h"

namespace troupe::ref {
namespace {

std::vector<float> dequantize(const gguf::tensor_info& t) {
    std::vector<float> out(static_cast<size_t>(t.n_elements()));
    const int64_t row = t.dims[0];
    for (int64_t r = 0; r < t.n_elements() / row; ++r) {
        dequantize_row(t.type, t.data + r * row_bytes(t.type, row), out.data() + r * row, row);
    }
    return out;
}

double rms_error(const std::vector<float>& a, const std::vector<float>& b) {
    double e = 0;
    for (size_t i = 0; i < a.size(); ++i) e += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    return std::sqrt(e / static_cast<double>(a.size()));
}

TEST(quants_vs_llama, our_quantizers_are_about_as_accurate_as_llama_cpp_on_the_same_weights) {
    struct row {
        const char* file;
        const char* tensor;
        ggml_type type;
        double max_ratio;  // our RMS error / llama.cpp's
    };
    const row rows[] = {
        {"models/rand10M-Q8_0.gguf", "blk.0.attn_q.weight", ggml_type::q8_0, 1.01},
        {"models/rand10M-Q4_0.gguf", "blk.0.attn_q.weight", ggml_type::q4_0, 1.01},
        {"models/rand10M-Q4_K_M.gguf", "blk.0.attn_q.weight", ggml_type::q4_k, 1.05},
        {"models/rand10M-Q6_K.gguf", "blk.0.attn_q.weight", ggml_type::q6_k, 1.05},
    };
    TROUPE_REQUIRE_SHARED(f16_path, "models/rand10M-F16.gguf");
    auto f16 = gguf::gguf_file::open(f16_path);
    ASSERT_TRUE(f16.ok()) << f16.message();
    for (const row& r : rows) {
        TROUPE_REQUIRE_SHARED(path, r.file);
        auto q = gguf::gguf_file::open(path);
        ASSERT_TRUE(q.ok()) << q.message();
        const gguf::tensor_info* theirs = (*q)->find_tensor(r.tensor);
        const gguf::tensor_info* source = (*f16)->find_tensor(r.tensor);
        ASSERT_TRUE(theirs && source);
        ASSERT_EQ(theirs->type, r.type);
        const std::vector<float> x = dequantize(*source);
        const int64_t n = source->dims[0];
        std::vector<uint8_t> ours(theirs->n_bytes);
        for (int64_t i = 0; i < source->n_elements() / n; ++i) {
            quantize_row(r.type, x.data() + i * n, ours.data() + i * row_bytes(r.type, n), n);
        }
        gguf::tensor_info mine = *theirs;
        mine.data = ours.data();
        const double e_theirs = rms_error(x, dequantize(*theirs));
        const double e_ours = rms_error(x, dequantize(mine));
        std::printf("%-5s ours %.6g llama.cpp %.6g ratio %.4f\n", std::string(traits(r.type).name).c_str(), e_ours,
                    e_theirs, e_ours / e_theirs);
        EXPECT_LT(e_ours, e_theirs * r.max_ratio) << traits(r.type).name;
    }
}

}  // namespace
}  // namespace troupe::ref
