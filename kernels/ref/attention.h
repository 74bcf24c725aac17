// Reference causal attention over a block-table KV cache (the scalar twin of the attention plugins'
// kernels). Layout and semantics: core/model/ops.h (attention_call).
#pragma once

#include "core/model/ops.h"

namespace troupe::ref {

// Writes this step's K/V rows into the pools, then for every token t (sequence s, position p) and
// query head h (KV head h / (n_heads / n_kv_heads)): out[t, h] = softmax(scale * q·k[0..p]) · v[0..p].
void attention(const attention_call& call);

}  // namespace troupe::ref
