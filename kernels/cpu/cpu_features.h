// CPU feature detection and the dispatch level the optimized kernels run at.
//
// Every SIMD kernel file is compiled with its own ISA flags (kernels/CMakeLists.txt); which one runs is
// decided here at run time, so one binary runs on any x86-64 (and falls back to scalar elsewhere).
// The level is process-wide; tests force each available level in turn to compare it with the reference.
#pragma once

#include <string_view>
#include <vector>

namespace troupe::cpu {

struct cpu_features {
    bool avx2 = false;
    bool fma = false;
    bool f16c = false;
    bool avx512f = false;
    bool avx512bw = false;
    bool avx512vl = false;
    bool avx512vnni = false;
    bool avx512bf16 = false;
};

// What the kernels use: scalar (portable C++), avx2 (AVX2 + FMA + F16C),
// avx512 (F + BW + VL + VNNI + FMA + F16C; BF16 not required).
enum class dispatch_level { scalar = 0, avx2 = 1, avx512 = 2 };

const cpu_features& detected_features();
std::string_view name(dispatch_level level);

// Levels this CPU can run, lowest first (scalar is always there).
std::vector<dispatch_level> available_levels();
dispatch_level best_level();

// The level kernels dispatch to now (best_level() unless forced).
dispatch_level active_level();
// Forces a level (tests, benchmarks); it must be one of available_levels().
void force_level(dispatch_level level);

}  // namespace troupe::cpu
