// Reference causal attention over a block-table KV cache (the scalar twin of the attention plugins'
// kernels). Layout and semantics: core/model/ops.h (attention_call).
#pragma once

#include "core/model/ops.h"

namespace troupe::ref {

// Writes this step's K/V rows into the pools, then for every token t (sequence s, position p) and
// query head h (KV head h / (n_heads / n_kv_heads)): out[t, h] = softmax(cap(scale * q·k[f..p])) · v[f..p], where
// f = max(0, p - window + 1) with a window (0: f = 0) and cap(s) = softcap · tanh(s / softcap) with a softcap
// (0: cap(s) = s). Causal calls with float32 pools.
void attention(const attention_call& call);

}  // namespace troupe::ref
