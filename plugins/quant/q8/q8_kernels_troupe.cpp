// q8_kernels.h's products by troupe's CPU kernel library (troupe_kernels, linked statically into the plugin):
// the same kernels and 16-row panels the core uses for its own Q8_0 / Q4_0 weights, so there is one copy of them.
// This binding is the one file of the plugin that includes troupe headers outside the SDK (allowed by name in
// tests/plugins/sdk_only_includes.sh); SDK block structs and the library's are the same bytes (asserted below).
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q8_panels.h"
#include "q8_kernels.h"

namespace troupe::q8 {
namespace {

static_assert(sizeof(troupe_block_q8_0) == sizeof(troupe::block_q8_0) && TROUPE_QK8_0 == troupe::qk8_0,
              "the SDK's Q8_0 block is GGUF's");
static_assert(static_cast<uint32_t>(ggml_type::q8_0) == TROUPE_TYPE_Q8_0, "type ids follow GGUF");

const troupe::block_q8_0* library_blocks(const block_q8_0* w) {
    return reinterpret_cast<const troupe::block_q8_0*>(w);
}

cpu::activation_recipe kernel_recipe(activations recipe) {
    return recipe == activations::float32 ? cpu::activation_recipe::float32 : cpu::activation_recipe::quantized;
}

}  // namespace

size_t panel_bytes(int64_t n_in, int64_t n_out, activations recipe) {
    if (!cpu::q8_panels_supported(ggml_type::q8_0, kernel_recipe(recipe))) return 0;
    return cpu::q8_panels_bytes(matmul_weight{ggml_type::q8_0, nullptr, n_in, n_out, row_bytes(ggml_type::q8_0, n_in)});
}

int pack_panels(const block_q8_0* w, int64_t n_in, int64_t n_out, size_t row_stride, void* dst) {
    return static_cast<int>(
        cpu::pack_q8_panels(matmul_weight{ggml_type::q8_0, library_blocks(w), n_in, n_out, row_stride}, dst, nullptr));
}

void matmul(const block_q8_0* w, const void* panels, int panel_form, int64_t n_in, int64_t n_out, size_t row_stride,
            const float* x, float* y, int64_t n_tokens, const parallel_fn& parallel_for, activations recipe,
            const ranges_fn& parallel_ranges) {
    matmul_weight mw{ggml_type::q8_0, library_blocks(w), n_in, n_out, row_stride};
    mw.panels = panels;
    mw.codes = static_cast<panel_codes>(panel_form);
    if (parallel_ranges) {
        cpu::matmul(mw, x, y, n_tokens, parallel_for, parallel_ranges, kernel_recipe(recipe));
    } else {
        cpu::matmul(mw, x, y, n_tokens, parallel_for, kernel_recipe(recipe));
    }
}

const char* matmul_implementation() {
    return "troupe_kernels";
}

}  // namespace troupe::q8
