// The descriptions of the architecture families troupe runs, one file each (arch_<family>.cpp); the registry
// (arch_registry.cpp) lists them.
#pragma once

#include "core/model/arch/arch_description.h"

namespace troupe {

const arch_description& llama_description();      // llama (and Mixtral: llama with experts)
const arch_description& mistral_description();    // mistral: llama's graph under its own name
const arch_description& qwen2_description();      // q/k/v biases, NeoX RoPE, tied output
const arch_description& phi3_description();       // fused qkv and gate/up, NeoX RoPE
const arch_description& gemma2_description();     // GeGLU, post norms, soft-capping, alternating windows
const arch_description& deepseek2_description();  // MLA attention, MoE FFN after the leading dense layers

}  // namespace troupe
