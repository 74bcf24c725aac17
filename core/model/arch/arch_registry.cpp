#include "core/model/arch/arch_registry.h"

#include <array>

#include "core/model/arch/arch_families.h"

namespace troupe {
namespace {

using description_fn = const arch_description& (*)();

constexpr std::array<description_fn, 6> k_families = {llama_description, mistral_description, qwen2_description,
                                                      phi3_description,  gemma2_description,  deepseek2_description};

}  // namespace

const arch_description* find_architecture(std::string_view name) {
    for (const description_fn family : k_families) {
        if (family().name == name) return &family();
    }
    return nullptr;
}

std::string known_architectures() {
    std::string names;
    for (const description_fn family : k_families) {
        if (!names.empty()) names += ", ";
        names += family().name;
    }
    return names;
}

result<const arch_description*> architecture_of(const gguf::gguf_file& file) {
    auto arch = file.get_string("general.architecture");
    if (!arch.ok()) return make_error(arch.message());
    if (const arch_description* d = find_architecture(*arch)) return d;
    return make_error(file.path() + ": general.architecture is '" + *arch +
                      "', which troupe does not know (it knows: " + known_architectures() + ")");
}

}  // namespace troupe
