// kv/kivi scalar kernels: the reference twin of kivi_kernels_avx512.cpp.
#include "kivi_format.h"
#include "plugins/quant/kv_common/kv_kernels.h"

namespace troupe::kv {

block_kernels kivi_kernels_ref() {
    return kernels_of<kivi_decoder_base<isa_ref>>();
}

}  // namespace troupe::kv
