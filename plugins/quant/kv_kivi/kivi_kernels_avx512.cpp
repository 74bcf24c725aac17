// kv/kivi AVX-512F/BW kernels (built with -mavx512f -mavx512bw -mavx512vl; called only when the CPU has them and
// lacks VNNI): kivi_kernels_avx512.h with vpdpbusd emulated.
#include "kivi_kernels_avx512.h"

namespace troupe::kv {

block_kernels kivi_kernels_avx512_for(const kivi_format& f) {
    return kivi_kernels_with<dot_bw>(f);
}

}  // namespace troupe::kv
