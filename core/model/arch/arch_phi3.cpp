// phi3 (Phi-3, Phi-3.5 mini): q, k and v in one matrix (attn_qkv: q rows, k rows, v rows), gate and up in one
// (ffn_up of 2 * feed_forward_length rows: gate first), NeoX RoPE, a sliding window on every layer when the file
// sets one (phi3.attention.sliding_window; none takes effect when it covers the whole context).
#include "core/model/arch/arch_families.h"

namespace troupe {

const arch_description& phi3_description() {
    static const arch_description d{.name = "phi3",
                                    .rope = rope_mode::neox,
                                    .fused_qkv = true,
                                    .fused_gate_up = true,
                                    .window = window_layers::all};
    return d;
}

}  // namespace troupe
