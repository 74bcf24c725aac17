// What a speculative-heads plugin (spec/medusa, spec/eagle) needs of its target and of its side file, through the
// SDK's model services (tensors.h) only:
//
//   target_model      the target's shape from its metadata (`<arch>.*` keys, as troupe's loader reads them) and the
//                     id the host computes for it (`troupe.fingerprint`, when the host answers it)
//   side_file         a GGUF file named in params, open for the instance's lifetime; checked to be of the expected
//                     general.architecture and made for this target (spec_design.md: `<arch>.target.{n_vocab, dim,
//                     n_layers, fingerprint}`), else one error: "heads.gguf: made for another model (...), this target
//                     is ..."
//   float_matrix      a tensor as float32 rows: the file's own memory when stored as F32, else a decoded copy (F16,
//                     BF16, and the block formats of quant_codec.h)
//
// Errors are thrown as plugin_error (std::runtime_error) and become the create() message (plugin_support::guarded).
#pragma once

#include <troupe/plugin.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace troupe::spec_common {

struct plugin_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A tensor of a model or side file as float32, rows of ne[0].
class float_matrix {
public:
    float_matrix() = default;
    // Moves keep data() valid (a vector's buffer moves with it); a copy would not, so there is none.
    float_matrix(float_matrix&&) = default;
    float_matrix& operator=(float_matrix&&) = default;
    float_matrix(const float_matrix&) = delete;
    float_matrix& operator=(const float_matrix&) = delete;
    // Reads `name` of `file`; `expected` (ggml order, 1 or 2 entries) must match the tensor's shape.
    static float_matrix read(const troupe_model_services& s, const troupe_tensor_file* file, const std::string& where,
                             const std::string& name, const std::vector<int64_t>& expected);
    const float* data() const { return data_; }
    const float* row(int64_t r) const { return data_ + r * n_cols_; }
    int64_t n_rows() const { return n_rows_; }
    int64_t n_cols() const { return n_cols_; }

private:
    std::vector<float> owned_;  // [n_rows, n_cols] when decoded
    const float* data_ = nullptr;
    int64_t n_rows_ = 0, n_cols_ = 0;
};

struct target_model {
    std::string architecture;  // "llama"
    std::string fingerprint;   // "" when the host does not answer troupe.fingerprint
    int32_t n_vocab = 0, dim = 0, n_layers = 0;
    int32_t n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn_dim = 0;
    float rms_eps = 1e-5f;
    float rope_base = 10000.0f;
    float rope_scale = 1.0f;  // positions are multiplied by this
    int32_t rope_dims = 0;

    // Reads the loaded model's metadata; `label` prefixes errors ("spec/eagle").
    static target_model read(const troupe_model_services& s, const std::string& label);
    std::string describe() const;  // "fingerprint X (n_vocab 512, dim 64, n_layers 5)"
};

// A side GGUF file, closed on destruction.
class side_file {
public:
    side_file(const troupe_model_services& s, const std::string& path, const std::string& param_key);
    ~side_file();
    side_file(const side_file&) = delete;
    side_file& operator=(const side_file&) = delete;

    const troupe_tensor_file* file() const { return file_; }
    const std::string& path() const { return path_; }
    // Refuses a file whose general.architecture is not `arch` (written by `troupe distill --kind <arch>`) or that was
    // made for another model than `target`.
    void check_made_for(const target_model& target, const std::string& arch) const;
    int64_t integer(const std::string& key) const;  // throws when absent
    double number(const std::string& key) const;    // throws when absent
    float_matrix matrix(const std::string& name, const std::vector<int64_t>& expected) const;

private:
    const troupe_model_services* s_;
    std::string path_;
    troupe_tensor_file* file_ = nullptr;
};

// The model services of create's params, checked to be there (version 1 suffices).
const troupe_model_services& model_services(const troupe_plugin_params* params, const std::string& label);

}  // namespace troupe::spec_common
