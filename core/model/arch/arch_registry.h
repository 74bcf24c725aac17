// The registry of architecture descriptions: general.architecture -> arch_description.
#pragma once

#include <string>
#include <string_view>

#include "core/gguf/gguf_file.h"
#include "core/model/arch/arch_description.h"
#include "core/result.h"

namespace troupe {

// The description of `name`, or null when troupe does not know it.
const arch_description* find_architecture(std::string_view name);

// The architectures troupe knows, for messages: "llama, mistral, qwen2, phi3, gemma2, deepseek2".
std::string known_architectures();

// The description of the file's general.architecture; an unknown one is an error naming the file, the
// architecture and the ones troupe knows.
result<const arch_description*> architecture_of(const gguf::gguf_file& file);

}  // namespace troupe
