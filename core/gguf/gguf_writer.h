// gguf_writer: builds a GGUF file (v3 by default) in memory or on disk: metadata of every type, tensors
// given as raw bytes in their ggml layout, data padded to general.alignment. Used by tests (synthetic and
// corrupted files) and by `troupe synth`.
//
// Output layout: header, key/values in insertion order, tensor infos in insertion order, zero padding to
// the alignment, then each tensor's bytes at an aligned offset (zero padding between tensors).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/gguf/gguf_file.h"
#include "core/result.h"
#include "kernels/ggml_types.h"

namespace troupe::gguf {

// The GGUF value type of a scalar alternative (u8 for uint8_t, string for std::string, ...).
value_type scalar_type(const scalar& s);

class gguf_writer {
public:
    gguf_writer() = default;

    // Header version written (2 or 3; other values only for tests of the reader's refusal).
    void set_version(uint32_t version) { version_ = version; }
    // Sets general.alignment (u32, a power of two) and pads with it.
    void set_alignment(uint32_t alignment);

    // Metadata. Setting an existing key replaces its value and keeps its position.
    void set(const std::string& key, metadata_value value);
    void set_scalar(const std::string& key, scalar value);  // the type follows the alternative held
    void set_string(const std::string& key, const std::string& value);
    void set_u32(const std::string& key, uint32_t value) { set_scalar(key, value); }
    void set_i32(const std::string& key, int32_t value) { set_scalar(key, value); }
    void set_f32(const std::string& key, float value) { set_scalar(key, value); }
    void set_bool(const std::string& key, bool value) { set_scalar(key, value); }
    // An array; every element must hold the alternative of element_type (asserted).
    void set_array(const std::string& key, value_type element_type, std::vector<scalar> elements);
    void set_string_array(const std::string& key, const std::vector<std::string>& values);
    void set_f32_array(const std::string& key, const std::vector<float>& values);
    void set_i32_array(const std::string& key, const std::vector<int32_t>& values);
    void remove(const std::string& key);
    // Copies every key of `from` whose name starts with prefix ("" for all, "tokenizer." for the
    // vocabulary), in file order; general.alignment is copied only with the empty prefix.
    void copy_metadata(const gguf_file& from, std::string_view prefix = "");

    // A tensor: dims in ggml order (dims[0] = row length, a multiple of the type's block size), bytes in
    // the type's layout, exactly n_rows * row_bytes(type, dims[0]) of them (asserted).
    void add_tensor(const std::string& name, ggml_type type, std::vector<int64_t> dims, std::span<const uint8_t> bytes);
    // The same, taking the bytes over without a copy (for large models).
    void add_tensor(const std::string& name, ggml_type type, std::vector<int64_t> dims, std::vector<uint8_t>&& bytes);
    void add_tensor_f32(const std::string& name, std::vector<int64_t> dims, std::span<const float> values);

    size_t n_tensors() const { return tensors_.size(); }
    size_t n_keys() const { return keys_.size(); }

    // The whole file.
    std::vector<uint8_t> to_bytes() const;
    // Writes the file (via PATH.tmp and a rename; the tensors are streamed, not copied); errors name the path.
    status write(const std::string& path) const;

private:
    // Header, key/values, tensor infos and the padding before the data section.
    std::vector<uint8_t> header_bytes() const;
    struct pending_tensor {
        std::string name;
        ggml_type type;
        std::vector<int64_t> dims;
        std::vector<uint8_t> bytes;
    };
    uint32_t version_ = 3;
    uint32_t alignment_ = 32;
    std::vector<std::pair<std::string, metadata_value>> keys_;
    std::vector<pending_tensor> tensors_;
};

}  // namespace troupe::gguf
