#include "mla_model.h"

#include <cstdio>

#include "plugins/common/half.h"

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

std::string type_name(uint32_t type) {
    const troupe_type_layout l = troupe_type_layout_of(type);
    return l.name != nullptr ? l.name : "type " + std::to_string(type);
}

// "6144 bytes" below a MiB, else "1920.0 MiB".
std::string size_text(size_t bytes) {
    if (bytes < (size_t{1} << 20)) return std::to_string(bytes) + " bytes";
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return text;
}

}  // namespace

std::string mla_model::describe_kv_b() const {
    if (owned_.empty()) return "attn_kv_b " + stored_type_ + " as stored (0 bytes held)";
    return "attn_kv_b " + stored_type_ + " held as F16 (" + size_text(resident_bytes()) + ")";
}

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
    // Every layer's attn_kv_b: the file's rows when F32, F16 or BF16 (all layers must share one type), else decoded
    // (float_matrix checks the shape and names a type it cannot decode) and kept as F16.
    const int64_t n_rows = static_cast<int64_t>(sh.n_heads) * sh.kv_b_rows_per_head();
    const size_t layer_elements = static_cast<size_t>(n_rows) * sh.kv_lora_rank;
    m.kv_b_.resize(static_cast<size_t>(sh.n_layers));
    for (int32_t il = 0; il < sh.n_layers; ++il) {
        const std::string name = "blk." + std::to_string(il) + ".attn_kv_b.weight";
        troupe_tensor t{};
        t.struct_size = sizeof t;
        t.version = TROUPE_TENSOR_VERSION;
        if (s.tensor(s.host_ctx, s.model, name.c_str(), &t) != TROUPE_OK) throw plugin_error(last_error(s));
        const bool half = t.type == TROUPE_TYPE_F16 || t.type == TROUPE_TYPE_BF16;
        const bool direct = half || t.type == TROUPE_TYPE_F32;
        const std::string type = type_name(t.type);
        if (il == 0) {
            m.stored_type_ = type;
            m.kv_b_type_ = t.type == TROUPE_TYPE_F32    ? weight_type::f32
                           : t.type == TROUPE_TYPE_BF16 ? weight_type::bf16
                                                        : weight_type::f16;
            if (!direct) m.owned_.resize(layer_elements * static_cast<size_t>(sh.n_layers));
        } else if (type != m.stored_type_) {
            throw plugin_error(label + ": tensor " + name + " is stored as " + type + ", blk.0.attn_kv_b.weight as " +
                               m.stored_type_ + "; attention/mla reads every layer's attn_kv_b in one type");
        }
        if (!direct) {
            const spec_common::float_matrix f =
                spec_common::float_matrix::read(s, s.model, label, name, {sh.kv_lora_rank, n_rows});
            uint16_t* dst = m.owned_.data() + layer_elements * static_cast<size_t>(il);
            for (size_t i = 0; i < layer_elements; ++i) dst[i] = quant_common::fp32_to_fp16(f.data()[i]);
            m.kv_b_[static_cast<size_t>(il)] = dst;
            continue;
        }
        if (t.n_dims != 2 || t.ne[0] != sh.kv_lora_rank || t.ne[1] != n_rows) {
            throw plugin_error(label + ": tensor " + name + " has shape [" + std::to_string(t.ne[0]) + ", " +
                               std::to_string(t.ne[1]) + (t.n_dims > 2 ? ", ..." : "") + "], expected [" +
                               std::to_string(sh.kv_lora_rank) + ", " + std::to_string(n_rows) +
                               "] (kv_lora_rank, n_heads * (qk_nope + v_dim))");
        }
        m.kv_b_[static_cast<size_t>(il)] = t.data;
    }
    return m;
}

}  // namespace troupe::mla
