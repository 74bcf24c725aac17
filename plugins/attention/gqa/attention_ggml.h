// attend_ggml: llama.cpp's default CPU attention arithmetic, bit for bit (attention_ggml.cpp), for the gqa plugin's
// `numerics: ggml`.
#pragma once

#include <troupe/plugin.h>

#include <cstdint>

namespace troupe::gqa {

// Computes work items [begin, end), item = token * n_kv_heads + kv_head, of a call without tree rows (causal by
// position, windows allowed). A call of two or more tokens takes llama.cpp's batched (prompt) products by V, a
// call of one token its decode products.
void attend_ggml(const troupe_attention_call& call, int64_t begin, int64_t end);

}  // namespace troupe::gqa
