// deepseek2 (DeepSeek-V2, V2-Lite): multi-head latent attention (core/model/mla_block.h) in every layer, and a
// mixture of experts (core/model/moe_ffn.h) as the FFN of the layers after deepseek2.leading_dense_block_count.
#include "core/model/arch/arch_families.h"

namespace troupe {

const arch_description& deepseek2_description() {
    static const arch_description d{.name = "deepseek2", .attention = attention_block::mla, .experts_required = true};
    return d;
}

}  // namespace troupe
