// Helpers for the GGUF tests: temporary files, byte patching, and a small synthetic model.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/gguf/gguf_writer.h"

namespace troupe::testing {

// A fresh path under a per-process temporary folder (removed at exit).
std::string temp_path(const std::string& name);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> read_file(const std::string& path);

// Position of the first occurrence of needle in bytes (asserts that there is one).
size_t find_bytes(const std::vector<uint8_t>& bytes, std::string_view needle);

template <class T>
void patch(std::vector<uint8_t>& bytes, size_t at, T value) {
    std::memcpy(bytes.data() + at, &value, sizeof(T));
}

// Positions of one tensor info's fields in a file built by gguf_writer (found by the unique name).
struct tensor_info_fields {
    size_t name;    // the u64 length before the name
    size_t n_dims;  // u32
    size_t dims;    // n_dims u64
    size_t type;    // u32
    size_t offset;  // u64
};
tensor_info_fields find_tensor_info(const std::vector<uint8_t>& bytes, const std::string& name, uint32_t n_dims);

// A small model exercising every metadata type and the computable tensor types:
//   keys "test.*" of each scalar type, arrays, general.alignment 32;
//   tensors "tensor.f32" [64, 2] F32, "tensor.q8_0" [64, 3] Q8_0, "tensor.q4_k" [256, 1] Q4_K, ...
gguf::gguf_writer small_model_writer();

}  // namespace troupe::testing
