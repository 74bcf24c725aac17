#include "kernels/cpu/weight_panels.h"

#include "kernels/cpu/kquant_panels.h"
#include "kernels/cpu/q8_panels.h"

namespace troupe::cpu {

static_assert(q8_panel_rows == weight_panel_rows && kquant_panel_rows == weight_panel_rows);

bool panels_supported(ggml_type type, activation_recipe recipe) {
    return q8_panels_supported(type, recipe) || kquant_panels_supported(type, recipe);
}

size_t panels_bytes(const matmul_weight& w) {
    return is_k_quant(w.type) ? kquant_panels_bytes(w) : q8_panels_bytes(w);
}

panel_codes pack_panels(const matmul_weight& w, void* dst, thread_pool* pool) {
    if (is_k_quant(w.type)) {
        pack_kquant_panels(w, dst, pool);
        return panel_codes::plus_128;  // unused for k-quant panels; the default keeps pieces comparable
    }
    return pack_q8_panels(w, dst, pool);
}

}  // namespace troupe::cpu
