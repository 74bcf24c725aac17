// Helpers of the ops tests: seeded random data, quantized weight matrices, dispatch-level scoping.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/ref/ops.h"

namespace troupe::testing {

// N(0, 1) values with a few outliers (x 8) so quantization scales vary between blocks.
std::vector<float> random_floats(int64_t n, uint32_t seed);

// A weight matrix of n_out rows quantized from random floats; row_stride may exceed the row's bytes.
struct test_weight {
    std::vector<uint8_t> bytes;
    matmul_weight view;
    std::vector<float> dequantized;  // [n_out, n_in]
};
test_weight make_weight(ggml_type type, int64_t n_in, int64_t n_out, uint32_t seed, size_t extra_stride = 0);

// Forces a dispatch level for the scope.
class scoped_level {
public:
    explicit scoped_level(cpu::dispatch_level level) : saved_(cpu::active_level()) { cpu::force_level(level); }
    ~scoped_level() { cpu::force_level(saved_); }
    scoped_level(const scoped_level&) = delete;
    scoped_level& operator=(const scoped_level&) = delete;

private:
    cpu::dispatch_level saved_;
};

std::string level_name(cpu::dispatch_level level);

// Token counts a packed weight form must serve: 1..33 (every tile size, one tile and several) and 512 (several token
// chunks).
std::vector<int64_t> every_token_count();

// A weight's shape in a table of cases: row length, rows, extra bytes per row (a padded stride).
struct shape_case {
    int64_t n_in, n_out;
    size_t extra_stride;
};

// cpu::matmul of w with n_tokens random tokens (seeded) equals ref::matmul bit for bit at every level this CPU runs,
// on one thread and on two (fatal failures: the caller may stop on HasFatalFailure()).
void expect_every_level_equals_the_reference(const test_weight& w, int64_t n_tokens, uint32_t seed);

// The same for weights of `type` with each row length in n_ins, 1, 17 (rows padded: a longer stride) and 67 rows, and
// decode and prefill token counts (1, 2, 3, 4, 5, 9, 33, 70); stops at the first fatal failure.
void expect_every_level_equals_the_reference_over_shapes(ggml_type type, std::initializer_list<int64_t> n_ins,
                                                         uint32_t seed);

}  // namespace troupe::testing
