// kv/int8 AVX-512 VNNI kernels (built with -mavx512f -mavx512bw -mavx512vl -mavx512vnni; called only when the CPU
// has them): one vpdpbusd per 16 rows and 4 channels of a block's keys.
#include "int8_kernels_avx512.h"

namespace troupe::kv {

block_kernels int8_kernels_avx512_vnni() {
    return int8_kernels_with<dot_vnni>();
}

}  // namespace troupe::kv
