// qwen2 (Qwen2, Qwen2.5): llama's graph with F32 biases on q, k and v, RoPE on the halves of each head (NeoX), and
// the output matrix tied to the embeddings where the file has no output.weight (the small models).
#include "core/model/arch/arch_families.h"

namespace troupe {

const arch_description& qwen2_description() {
    static const arch_description d{.name = "qwen2", .rope = rope_mode::neox, .qkv_bias = true};
    return d;
}

}  // namespace troupe
