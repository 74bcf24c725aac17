// llama and mistral: the base graph (SwiGLU FFN, RoPE on adjacent pairs, separate or tied output). A file with
// "<arch>.expert_count" is Mixtral-style (MoE FFN in every layer); one with "<arch>.attention.sliding_window"
// attends within that window in every layer (Mistral v0.1).
#include "core/model/arch/arch_families.h"

namespace troupe {

const arch_description& llama_description() {
    static const arch_description d{.name = "llama", .window = window_layers::all};
    return d;
}

const arch_description& mistral_description() {
    static const arch_description d{.name = "mistral", .window = window_layers::all};
    return d;
}

}  // namespace troupe
