// gemma2 (Gemma 2): GeGLU FFN (tanh GELU on the gate), RMS norms before and after both attention and FFN (the
// "post" norms apply to the branch output before the residual add), embeddings scaled by sqrt(dim), attention
// scores soft-capped (gemma2.attn_logit_softcapping) and final logits too (gemma2.final_logit_softcapping), a
// sliding window (gemma2.attention.sliding_window) on the even layers with the odd ones global, NeoX RoPE, and the
// output tied to the embeddings. Norm weights are used as stored (GGUF converters fold Gemma's +1 into them).
#include "core/model/arch/arch_families.h"

namespace troupe {

const arch_description& gemma2_description() {
    static const arch_description d{.name = "gemma2",
                                    .rope = rope_mode::neox,
                                    .activation = ffn_activation::gelu_tanh,
                                    .post_norms = true,
                                    .embed_scale_sqrt_dim = true,
                                    .window = window_layers::even};
    return d;
}

}  // namespace troupe
