#include "mla_model.h"

namespace troupe::mla {
namespace {

using spec_common::plugin_error;

std::string last_error(const troupe_model_services& s) {
    const char* e = s.last_error != nullptr ? s.last_error(s.host_ctx) : nullptr;
    return e != nullptr && e[0] != '\0' ? e : "no details";
}

// "<arch>.<key>" as a positive integer; throws naming the key when it is absent or not positive.
int32_t positive(const troupe_model_services& s, const std::string& label, const std::string& key) {
    int64_t v = 0;
    if (s.metadata_int == nullptr || s.metadata_int(s.host_ctx, s.model, key.c_str(), &v) != TROUPE_OK) {
        throw plugin_error(label + ": the model has no " + key + " (" + last_error(s) +
                           "): attention/mla runs models with multi-head latent attention (deepseek2); use "
                           "attention/gqa for others");
    }
    if (v <= 0 || v > (int64_t{1} << 20)) {
        throw plugin_error(label + ": the model's " + key + " is " + std::to_string(v) + ", expected a positive size");
    }
    return static_cast<int32_t>(v);
}

}  // namespace

std::string mla_shape::describe() const {
    return std::to_string(n_heads) + " heads, kv_lora_rank " + std::to_string(kv_lora_rank) + ", q/k head " +
           std::to_string(qk_nope) + " + " + std::to_string(rope_dim) + " RoPE, v " + std::to_string(v_dim) + ", " +
           std::to_string(n_layers) + " layers";
}

mla_model mla_model::read(const troupe_model_services& s, const std::string& label) {
    const char* arch_text = nullptr;
    if (s.metadata_string == nullptr ||
        s.metadata_string(s.host_ctx, s.model, "general.architecture", &arch_text) != TROUPE_OK ||
        arch_text == nullptr) {
        throw plugin_error(label + ": the model has no general.architecture (" + last_error(s) + ")");
    }
    const std::string a = std::string(arch_text) + ".";
    mla_model m;
    mla_shape& sh = m.shape_;
    sh.kv_lora_rank = positive(s, label, a + "attention.kv_lora_rank");
    sh.n_layers = positive(s, label, a + "block_count");
    sh.n_heads = positive(s, label, a + "attention.head_count");
    sh.rope_dim = positive(s, label, a + "rope.dimension_count");
    const int32_t key_length = positive(s, label, a + "attention.key_length");
    sh.v_dim = positive(s, label, a + "attention.value_length");
    if (key_length <= sh.rope_dim || sh.rope_dim % 2 != 0) {
        throw plugin_error(label + ": the model's " + a + "attention.key_length " + std::to_string(key_length) +
                           " must exceed its even " + a + "rope.dimension_count " + std::to_string(sh.rope_dim) +
                           " (q/k heads are the no-RoPE dims, then the RoPE dims)");
    }
    sh.qk_nope = key_length - sh.rope_dim;
    m.kv_b_.reserve(static_cast<size_t>(sh.n_layers));
    for (int32_t il = 0; il < sh.n_layers; ++il) {
        const std::string name = "blk." + std::to_string(il) + ".attn_kv_b.weight";
        m.kv_b_.push_back(spec_common::float_matrix::read(
            s, s.model, label, name, {sh.kv_lora_rank, static_cast<int64_t>(sh.n_heads) * sh.kv_b_rows_per_head()}));
    }
    return m;
}

}  // namespace troupe::mla
