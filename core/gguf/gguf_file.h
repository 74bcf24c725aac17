// gguf_file: a read-only, memory-mapped GGUF (v2, v3) file: metadata key/values and the tensor table.
//
// Layout: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv key/values, then n_tensors
// tensor infos (name, n_dims, dims, type, offset), then padding to general.alignment (default 32),
// then the tensor data; every tensor offset is relative to that data section and aligned.
// open() validates everything it can before returning: every error names the file and the field.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/result.h"
#include "kernels/ggml_types.h"

namespace troupe::gguf {

enum class value_type : uint32_t {
    u8 = 0,
    i8 = 1,
    u16 = 2,
    i16 = 3,
    u32 = 4,
    i32 = 5,
    f32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    u64 = 10,
    i64 = 11,
    f64 = 12,
};

std::string_view value_type_name(value_type t);

// One scalar of any GGUF value type.
using scalar = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string, uint64_t,
                            int64_t, double>;

struct metadata_value {
    value_type type;               // array for arrays
    value_type element_type;       // for arrays: the type of the elements (nested arrays are refused)
    std::vector<scalar> elements;  // one element for a scalar, n for an array
};

struct tensor_info {
    std::string name;
    ggml_type type;
    std::vector<int64_t> dims;  // ggml order: dims[0] is the row length (contiguous), dims[1] the number of rows
    uint64_t offset;            // relative to the data section
    const uint8_t* data;        // into the mapping
    size_t n_bytes;
    int64_t n_elements() const;
};

class gguf_file {
public:
    // Maps and validates the file. Errors: "<path>: <what was wrong> at <field / byte offset>".
    static result<std::shared_ptr<const gguf_file>> open(const std::string& path);
    ~gguf_file();
    gguf_file(const gguf_file&) = delete;
    gguf_file& operator=(const gguf_file&) = delete;

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    size_t alignment() const { return alignment_; }
    size_t file_size() const { return size_; }
    // Byte where the tensor data section begins: the end of the tensor infos rounded up to the alignment
    // (it may lie past the end of a file without tensors).
    size_t data_offset() const { return data_offset_; }

    // Metadata in file order (keys) and by key.
    const std::vector<std::string>& keys() const { return key_order_; }
    const metadata_value* find(const std::string& key) const;

    // Typed access. Integer getters accept any integer type whose value fits; errors name file and key.
    result<uint64_t> get_uint(const std::string& key) const;
    result<int64_t> get_int(const std::string& key) const;
    result<double> get_float(const std::string& key) const;  // any numeric type
    result<bool> get_bool(const std::string& key) const;
    result<std::string> get_string(const std::string& key) const;
    result<std::vector<std::string>> get_string_array(const std::string& key) const;
    result<std::vector<float>> get_float_array(const std::string& key) const;
    result<std::vector<int64_t>> get_int_array(const std::string& key) const;
    // Convenience: the value if present and of a fitting type, else the fallback.
    uint64_t uint_or(const std::string& key, uint64_t fallback) const;
    double float_or(const std::string& key, double fallback) const;
    std::string string_or(const std::string& key, const std::string& fallback) const;

    const std::vector<tensor_info>& tensors() const { return tensors_; }
    const tensor_info* find_tensor(const std::string& name) const;
    // The tensor, checked for existence and shape; errors like
    // "model.gguf: tensor blk.3.attn_q.weight has shape [64, 60], expected [64, 64]".
    result<const tensor_info*> tensor(const std::string& name, std::span<const int64_t> expected_dims) const;

private:
    gguf_file() = default;
    std::string path_;
    uint32_t version_ = 0;
    size_t alignment_ = 32;
    const uint8_t* base_ = nullptr;
    size_t size_ = 0;
    size_t data_offset_ = 0;
    std::vector<std::string> key_order_;
    std::map<std::string, metadata_value> kv_;
    std::vector<tensor_info> tensors_;
    std::map<std::string, size_t> tensor_index_;
    friend class gguf_reader;
};

// Human-readable dump for `troupe info`: header, metadata (long arrays abbreviated), tensor table.
std::string describe(const gguf_file& file);

}  // namespace troupe::gguf
