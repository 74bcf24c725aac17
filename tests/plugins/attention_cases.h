// Shared by the parameterized attention/gqa tests: a case (a model shape, a kernel, the pools' element type, a
// sliding window and a soft cap), its name and printout, the cases of every combination, whether the CPU runs a
// kernel, and values F16 pools hold exactly.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/model/ops.h"
#include "kernels/fp16.h"

namespace troupe::testing {

struct attention_shape {
    const char* name;  // test name part
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
};

struct attention_kernel_case {
    attention_shape shape;
    const char* kernel;  // scalar, avx2 or avx512 (the plugin's kernel parameter)
    kv_dtype kv;
    int32_t window;
    float softcap;
};

inline void PrintTo(const attention_kernel_case& c, std::ostream* os) {
    *os << c.shape.name << " " << c.kernel << (c.kv == kv_dtype::f16 ? " kv f16" : " kv f32") << " window " << c.window
        << " softcap " << c.softcap;
}

// shape_kernel[_kv_f16]_window_W_softcap_C
inline std::string case_name(const ::testing::TestParamInfo<attention_kernel_case>& info) {
    const attention_kernel_case& c = info.param;
    return std::string(c.shape.name) + "_" + c.kernel + (c.kv == kv_dtype::f16 ? "_kv_f16" : "") + "_window_" +
           std::to_string(c.window) + "_softcap_" + std::to_string(static_cast<int>(c.softcap));
}

// Every kernel x pool type x shape x (window, softcap) mode, in that nesting.
inline std::vector<attention_kernel_case> attention_kernel_cases(const std::vector<const char*>& kernels,
                                                                 const std::vector<kv_dtype>& kvs,
                                                                 const std::vector<attention_shape>& shapes,
                                                                 const std::vector<std::pair<int32_t, float>>& modes) {
    std::vector<attention_kernel_case> cases;
    for (const char* kernel : kernels) {
        for (const kv_dtype kv : kvs) {
            for (const attention_shape& s : shapes) {
                for (const auto& [window, softcap] : modes) cases.push_back({s, kernel, kv, window, softcap});
            }
        }
    }
    return cases;
}

inline bool cpu_supports(const std::string& kernel) {
    if (kernel == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (kernel == "avx512") return __builtin_cpu_supports("avx512f");
    return true;
}

// Values halves hold exactly: F16 pools then store what float32 pools store.
inline std::vector<float> as_halves(std::vector<float> v) {
    for (float& x : v) x = fp16_to_fp32(fp32_to_fp16(x));
    return v;
}

}  // namespace troupe::testing
