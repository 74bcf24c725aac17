// kv/kivi AVX-512 VNNI kernels (built with -mavx512f -mavx512bw -mavx512vl -mavx512vnni; called only when the CPU
// has them): kivi_kernels_avx512.h with one vpdpbusd per 16 rows and 4 channels of a block's keys.
#include "kivi_kernels_avx512.h"

namespace troupe::kv {

block_kernels kivi_kernels_avx512_vnni_for(const kivi_format& f) {
    return kivi_kernels_with<dot_vnni>(f);
}

}  // namespace troupe::kv
