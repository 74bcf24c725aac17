// Software prefetches for troupe's plugins that the compiler keeps. GCC 12 deleted whole loops whose only statements
// were __builtin_prefetch calls (attention/gqa's per-head row prefetch left no instruction in its object code, and a
// decode from DRAM ran ~1.6x slower), so these are asm volatile. A prefetch of an address past a buffer does not
// fault. x86 only, as the kernels that call them.
#pragma once

namespace troupe::plugin_support {

// The line holding p into every cache level (prefetcht0).
inline void prefetch_l1(const void* p) {
    asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}

// The line holding p into L2 and below (prefetcht1).
inline void prefetch_l2(const void* p) {
    asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
}

// A weight stream read forward from memory at p: the line stream_l1_ahead bytes ahead into L1 and the line
// stream_l2_ahead bytes ahead into L2, once per 64 bytes consumed. One hint alone fell behind on Zen 4 (two cores
// streaming, the 1B shape's W4A16 decode, `troupe bench --n-gen 32`, three alternated rounds): the L1 one 8 KiB ahead
// 32-37 tok/s, the L2 one alone 26-29; both 47-51 (the L2 one at 16, 32 or 64 KiB alike).
constexpr int stream_l1_ahead = 8192;
constexpr int stream_l2_ahead = 32768;
inline void prefetch_stream(const void* p) {
    prefetch_l1(static_cast<const char*>(p) + stream_l1_ahead);
    prefetch_l2(static_cast<const char*>(p) + stream_l2_ahead);
}

}  // namespace troupe::plugin_support
