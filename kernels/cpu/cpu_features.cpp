#include "kernels/cpu/cpu_features.h"

#include <algorithm>
#include <atomic>

#include "core/result.h"

namespace troupe::cpu {
namespace {

cpu_features detect() {
    cpu_features f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512vnni = __builtin_cpu_supports("avx512vnni");
    f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
    // g++ 12 has no "f16c" name for __builtin_cpu_supports: CPUID leaf 1, ECX bit 29.
    unsigned eax = 1, ebx = 0, ecx = 0, edx = 0;
    __asm__ volatile("cpuid" : "+a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "c"(0));
    f.f16c = (ecx >> 29) & 1;
#endif
    return f;
}

dispatch_level detect_best(const cpu_features& f) {
#if defined(TROUPE_EMULATED_AVX512)  // kernels/emulation: the AVX-512 kernels run on AVX2 through SIMDe
    if (f.avx2 && f.fma && f.f16c) return dispatch_level::avx512;
#endif
    if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni && f.fma && f.f16c) return dispatch_level::avx512;
    if (f.avx2 && f.fma && f.f16c) return dispatch_level::avx2;
    return dispatch_level::scalar;
}

std::atomic<int>& active_storage() {
    static std::atomic<int> level{static_cast<int>(detect_best(detected_features()))};
    return level;
}

}  // namespace

const cpu_features& detected_features() {
    static const cpu_features features = detect();
    return features;
}

std::string_view name(dispatch_level level) {
    switch (level) {
        case dispatch_level::scalar:
            return "scalar";
        case dispatch_level::avx2:
            return "avx2";
        case dispatch_level::avx512:
            return "avx512";
    }
    return "?";
}

std::vector<dispatch_level> available_levels() {
    std::vector<dispatch_level> levels{dispatch_level::scalar};
    const cpu_features& f = detected_features();
    if (f.avx2 && f.fma && f.f16c) levels.push_back(dispatch_level::avx2);
    if (best_level() == dispatch_level::avx512) levels.push_back(dispatch_level::avx512);
    return levels;
}

dispatch_level best_level() {
    return detect_best(detected_features());
}

dispatch_level active_level() {
    return static_cast<dispatch_level>(active_storage().load(std::memory_order_relaxed));
}

void force_level(dispatch_level level) {
    const auto levels = available_levels();
    TROUPE_ASSERT(std::find(levels.begin(), levels.end(), level) != levels.end(),
                  std::string("dispatch level ") + std::string(name(level)) + " is not available on this CPU");
    active_storage().store(static_cast<int>(level), std::memory_order_relaxed);
}

}  // namespace troupe::cpu
