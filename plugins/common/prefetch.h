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

}  // namespace troupe::plugin_support
