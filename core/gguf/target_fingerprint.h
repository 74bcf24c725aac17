// target_fingerprint: a short id of the model a side file (Medusa heads, an EAGLE layer, a distilled drafter) was
// made for, so that a file made for another model is refused with a clear error.
//
// FNV-1a 64 over the vocabulary (each token's bytes then a 0 byte) and the shape of the llama graph
// (llama.embedding_length, block_count, attention.head_count, attention.head_count_kv, feed_forward_length, each as
// a decimal string then a 0 byte), written as 16 hex digits. Weights are left out on purpose: quantized copies of a
// model (Q8_0, Q4_0 of the same F32 file) compute nearly the same function and share the heads trained on it.
#pragma once

#include <string>

#include "core/gguf/gguf_file.h"
#include "core/result.h"

namespace troupe {

result<std::string> target_fingerprint(const gguf::gguf_file& file);

}  // namespace troupe
