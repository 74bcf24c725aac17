// kv/int8 AVX-512F/BW kernels (built with -mavx512f -mavx512bw -mavx512vl; called only when the CPU has them and
// lacks VNNI): vpdpbusd emulated exactly, the even and odd bytes widened to 16 bits and multiplied-and-paired by
// vpmaddwd (no saturation: a product is at most 255 * 127).
#include "int8_kernels_avx512.h"

namespace troupe::kv {

block_kernels int8_kernels_avx512() {
    return int8_kernels_with<dot_bw>();
}

}  // namespace troupe::kv
