#include "plugins/common/target_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "plugins/common/half.h"
#include "plugins/common/quant_codec.h"

namespace troupe::spec_common {
namespace {

std::string last_error(const troupe_model_services& s) {
    const char* e = s.last_error != nullptr ? s.last_error(s.host_ctx) : nullptr;
    return e != nullptr && e[0] != '\0' ? e : "no details";
}

bool get_int(const troupe_model_services& s, const troupe_tensor_file* f, const std::string& key, int64_t& out) {
    return s.metadata_int != nullptr && s.metadata_int(s.host_ctx, f, key.c_str(), &out) == TROUPE_OK;
}

bool get_float(const troupe_model_services& s, const troupe_tensor_file* f, const std::string& key, double& out) {
    return s.metadata_float != nullptr && s.metadata_float(s.host_ctx, f, key.c_str(), &out) == TROUPE_OK;
}

bool get_string(const troupe_model_services& s, const troupe_tensor_file* f, const std::string& key, std::string& out) {
    const char* v = nullptr;
    if (s.metadata_string == nullptr || s.metadata_string(s.host_ctx, f, key.c_str(), &v) != TROUPE_OK) return false;
    out = v != nullptr ? v : "";
    return true;
}

std::string shape_text(const int64_t* ne, int32_t n_dims) {
    std::string s = "[";
    for (int32_t i = 0; i < n_dims; ++i) s += (i > 0 ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

std::string dims_text(int64_t n_vocab, int64_t dim, int64_t n_layers) {
    return "n_vocab " + std::to_string(n_vocab) + ", dim " + std::to_string(dim) + ", n_layers " +
           std::to_string(n_layers);
}

// Q5_0 (what llama.cpp writes for rows that are not whole blocks of 256 in a Q4_K file: Qwen2-0.5B's embeddings in
// Q4_K_M): per block of 32 {fp16 d, qh[4], qs[16]}, weight = d * (q - 16), q's low 4 bits the nibbles of qs (low
// nibbles elements 0..15), bit 4 of element j bit j of qh.
void decode_q5_0(const uint8_t* b, float* y, int64_t count) {
    constexpr int block_bytes = 22;
    for (int64_t i = 0; i < count / 32; ++i, b += block_bytes, y += 32) {
        uint16_t d16;
        uint32_t qh;
        std::memcpy(&d16, b, sizeof d16);
        std::memcpy(&qh, b + 2, sizeof qh);
        const float d = quant_common::fp16_to_fp32(d16);
        const uint8_t* qs = b + 6;
        for (int j = 0; j < 16; ++j) {
            const int bit_lo = static_cast<int>((qh >> j) & 1), bit_hi = static_cast<int>((qh >> (j + 16)) & 1);
            y[j] = static_cast<float>(((qs[j] & 0x0f) | (bit_lo << 4)) - 16) * d;
            y[j + 16] = static_cast<float>(((qs[j] >> 4) | (bit_hi << 4)) - 16) * d;
        }
    }
}

// Q2_K (Q2_K files): per block of 256 {scales[16], qs[64], fp16 d, fp16 dmin}, weight = (d * sc[j]) * q - dmin * m[j]
// for sub-block j of 16 (scales[j] = sc | m << 4), q = bits 2 ((e % 128) / 32) of qs[32 (e / 128) + e % 32].
void decode_q2_k(const uint8_t* b, float* y, int64_t count) {
    constexpr int block_bytes = 84;
    for (int64_t i = 0; i < count / 256; ++i, b += block_bytes, y += 256) {
        const uint8_t* scales = b;
        const uint8_t* qs = b + 16;
        uint16_t d16, dmin16;
        std::memcpy(&d16, b + 80, sizeof d16);
        std::memcpy(&dmin16, b + 82, sizeof dmin16);
        const float d = quant_common::fp16_to_fp32(d16), dmin = quant_common::fp16_to_fp32(dmin16);
        for (int j = 0; j < 16; ++j) {
            const float dj = d * static_cast<float>(scales[j] & 0x0f), mj = dmin * static_cast<float>(scales[j] >> 4);
            for (int l = 0; l < 16; ++l) {
                const int e = 16 * j + l;
                const int q = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
                y[e] = dj * static_cast<float>(q) - mj;
            }
        }
    }
}

// Q3_K (Q3_K_M / Q3_K_S files): per block of 256 {hmask[32], qs[64], scales[12], fp16 d}, weight = (d * (sc[j] - 32))
// * q for sub-block j of 16, q = the low 2 bits of element e (qs[32 (e / 128) + e % 32] at bit 2 ((e % 128) / 32))
// minus 4 where its high bit (bit e / 32 of hmask[e % 32]) is clear; sc[j] 6 bits, the low 4 in nibble j / 8 of
// scales[j % 8], the high 2 in scales[8 + j % 4] at bit 2 (j / 4).
void decode_q3_k(const uint8_t* b, float* y, int64_t count) {
    constexpr int block_bytes = 110;
    for (int64_t i = 0; i < count / 256; ++i, b += block_bytes, y += 256) {
        const uint8_t* hmask = b;
        const uint8_t* qs = b + 32;
        const uint8_t* scales = b + 96;
        uint16_t d16;
        std::memcpy(&d16, b + 108, sizeof d16);
        const float d = quant_common::fp16_to_fp32(d16);
        for (int j = 0; j < 16; ++j) {
            const int low4 = j < 8 ? (scales[j] & 0x0f) : (scales[j - 8] >> 4);
            const int sc = (low4 | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
            const float dj = d * static_cast<float>(sc);
            for (int l = 0; l < 16; ++l) {
                const int e = 16 * j + l;
                const int low = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
                const int q = ((hmask[e % 32] >> (e / 32)) & 1) ? low : low - 4;
                y[e] = dj * static_cast<float>(q);
            }
        }
    }
}

// Q5_K (Q5_K_M files' embeddings and some of their matrices): per block of 256 {fp16 d, fp16 dmin, scales[12] packed
// as Q4_K's 6-bit scales and mins, qh[32], qs[128]}, weight = (d * sc[j]) * q - dmin * m[j] for sub-block j of 32, q's
// low 4 bits Q4_K's nibbles, bit 4 of element 64c + l (l < 32) bit 2c of qh[l], of element 64c + 32 + l bit 2c + 1.
void decode_q5_k(const uint8_t* b, float* y, int64_t count) {
    constexpr int block_bytes = 176;
    for (int64_t i = 0; i < count / 256; ++i, b += block_bytes, y += 256) {
        uint16_t d16, dmin16;
        std::memcpy(&d16, b, sizeof d16);
        std::memcpy(&dmin16, b + 2, sizeof dmin16);
        const float d = quant_common::fp16_to_fp32(d16), dmin = quant_common::fp16_to_fp32(dmin16);
        const uint8_t* scales = b + 4;
        const uint8_t* qh = b + 16;
        const uint8_t* qs = b + 48;
        for (int j = 0; j < 8; ++j) {
            const int sc = j < 4 ? (scales[j] & 63) : ((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
            const int m = j < 4 ? (scales[j + 4] & 63) : ((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
            const float dj = d * static_cast<float>(sc), mj = dmin * static_cast<float>(m);
            const int c = j / 2, high = j % 2;
            for (int l = 0; l < 32; ++l) {
                const int low = high ? (qs[32 * c + l] >> 4) : (qs[32 * c + l] & 0x0f);
                const int q = low | (((qh[l] >> j) & 1) << 4);
                y[32 * j + l] = dj * static_cast<float>(q) - mj;
            }
        }
    }
}

// Q6_K (what k-quant files keep the output matrix in): per block of 256, weight = d * scales[i] * (q - 32) with a
// 6-bit q, its low 4 bits in ql and high 2 in qh, in the reference dequantizer's order.
void decode_q6_k(const troupe_block_q6_k* b, float* y, int64_t count) {
    for (int64_t i = 0; i < count / TROUPE_QK_K; ++i, ++b) {
        const float d = quant_common::fp16_to_fp32(b->d);
        const uint8_t* ql = b->ql;
        const uint8_t* qh = b->qh;
        const int8_t* sc = b->scales;
        for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
                y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
                y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
                y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
            }
        }
    }
}

// Decodes `count` elements of type `type` at src into y.
void decode(uint32_t type, const void* src, float* y, int64_t count, const std::string& where) {
    switch (type) {
        case TROUPE_TYPE_F32:
            std::copy_n(static_cast<const float*>(src), count, y);
            return;
        case TROUPE_TYPE_F16: {
            const auto* h = static_cast<const uint16_t*>(src);
            for (int64_t i = 0; i < count; ++i) y[i] = quant_common::fp16_to_fp32(h[i]);
            return;
        }
        case TROUPE_TYPE_BF16: {
            const auto* h = static_cast<const uint16_t*>(src);
            for (int64_t i = 0; i < count; ++i) y[i] = quant_common::fp32_from_bits(static_cast<uint32_t>(h[i]) << 16);
            return;
        }
        case TROUPE_TYPE_Q5_0:
            if (count % 32 == 0) {
                decode_q5_0(static_cast<const uint8_t*>(src), y, count);
                return;
            }
            break;
        case TROUPE_TYPE_Q2_K:
            if (count % TROUPE_QK_K == 0) {
                decode_q2_k(static_cast<const uint8_t*>(src), y, count);
                return;
            }
            break;
        case TROUPE_TYPE_Q3_K:
            if (count % TROUPE_QK_K == 0) {
                decode_q3_k(static_cast<const uint8_t*>(src), y, count);
                return;
            }
            break;
        case TROUPE_TYPE_Q5_K:
            if (count % TROUPE_QK_K == 0) {
                decode_q5_k(static_cast<const uint8_t*>(src), y, count);
                return;
            }
            break;
        case TROUPE_TYPE_Q6_K:
            if (count % TROUPE_QK_K == 0) {
                decode_q6_k(static_cast<const troupe_block_q6_k*>(src), y, count);
                return;
            }
            break;
        default:
            break;
    }
    const quant_common::codec* c = quant_common::codec::of(type);
    if (c == nullptr || count % c->block_size() != 0) {
        throw plugin_error(
            where + ": stored as type " + std::to_string(type) +
            ", which this plugin does not read (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q2_K, Q3_K, Q4_K, "
            "Q5_K, Q6_K, W4_G64/128)");
    }
    c->decode(src, y, count);
}

}  // namespace

float_matrix float_matrix::read(const troupe_model_services& s, const troupe_tensor_file* file,
                                const std::string& where, const std::string& name,
                                const std::vector<int64_t>& expected) {
    troupe_tensor t{};
    t.struct_size = sizeof t;
    t.version = TROUPE_TENSOR_VERSION;
    if (s.tensor(s.host_ctx, file, name.c_str(), &t) != TROUPE_OK) throw plugin_error(last_error(s));
    bool same = t.n_dims == static_cast<int32_t>(expected.size());
    for (size_t i = 0; same && i < expected.size(); ++i) same = t.ne[i] == expected[i];
    if (!same) {
        throw plugin_error(where + ": tensor " + name + " has shape " + shape_text(t.ne, t.n_dims) + ", expected " +
                           shape_text(expected.data(), static_cast<int32_t>(expected.size())));
    }
    float_matrix m;
    m.n_cols_ = t.ne[0];
    m.n_rows_ = t.ne[1] * t.ne[2] * t.ne[3];
    if (t.type == TROUPE_TYPE_F32) {
        m.data_ = static_cast<const float*>(t.data);
        return m;
    }
    m.owned_.resize(static_cast<size_t>(m.n_rows_ * m.n_cols_));
    if (t.type == TROUPE_TYPE_F16 || t.type == TROUPE_TYPE_BF16) {
        decode(t.type, t.data, m.owned_.data(), m.n_rows_ * m.n_cols_, where + ": tensor " + name);
    } else {
        const size_t row_bytes = t.n_bytes / static_cast<size_t>(m.n_rows_);
        for (int64_t r = 0; r < m.n_rows_; ++r) {
            decode(t.type, static_cast<const uint8_t*>(t.data) + r * row_bytes, m.owned_.data() + r * m.n_cols_,
                   m.n_cols_, where + ": tensor " + name);
        }
    }
    m.data_ = m.owned_.data();
    return m;
}

target_model target_model::read(const troupe_model_services& s, const std::string& label) {
    target_model t;
    const troupe_tensor_file* f = s.model;
    if (!get_string(s, f, "general.architecture", t.architecture)) {
        throw plugin_error(label + ": the model has no general.architecture (" + last_error(s) + ")");
    }
    const std::string a = t.architecture + ".";
    const auto need = [&](const std::string& key) {
        int64_t v = 0;
        if (!get_int(s, f, a + key, v) || v <= 0) throw plugin_error(label + ": the model has no " + a + key);
        return static_cast<int32_t>(v);
    };
    t.dim = need("embedding_length");
    t.n_layers = need("block_count");
    t.n_heads = need("attention.head_count");
    t.ffn_dim = need("feed_forward_length");
    int64_t kv = 0;
    t.n_kv_heads = get_int(s, f, a + "attention.head_count_kv", kv) && kv > 0 ? static_cast<int32_t>(kv) : t.n_heads;
    t.head_dim = t.dim / t.n_heads;
    double x = 0;
    if (get_float(s, f, a + "attention.layer_norm_rms_epsilon", x)) t.rms_eps = static_cast<float>(x);
    if (get_float(s, f, a + "rope.freq_base", x)) t.rope_base = static_cast<float>(x);
    int64_t rd = 0;
    t.rope_dims = get_int(s, f, a + "rope.dimension_count", rd) && rd > 0 ? static_cast<int32_t>(rd) : t.head_dim;
    std::string scaling;
    if (get_string(s, f, a + "rope.scaling.type", scaling) && scaling == "linear" &&
        get_float(s, f, a + "rope.scaling.factor", x) && x > 0) {
        t.rope_scale = static_cast<float>(1.0 / x);
    }
    // The vocabulary: the embedding matrix's rows (troupe checks them against the tokenizer at load).
    troupe_tensor emb{};
    emb.struct_size = sizeof emb;
    emb.version = TROUPE_TENSOR_VERSION;
    if (s.tensor(s.host_ctx, f, "token_embd.weight", &emb) != TROUPE_OK || emb.n_dims != 2) {
        throw plugin_error(label + ": the model has no 2-d token_embd.weight (" + last_error(s) + ")");
    }
    t.n_vocab = static_cast<int32_t>(emb.ne[1]);
    get_string(s, f, "troupe.fingerprint", t.fingerprint);
    return t;
}

std::string target_model::describe() const {
    const std::string dims = dims_text(n_vocab, dim, n_layers);
    return fingerprint.empty() ? "(" + dims + ")" : fingerprint + " (" + dims + ")";
}

side_file::side_file(const troupe_model_services& s, const std::string& path, const std::string& param_key)
    : s_(&s), path_(path) {
    if (s.open_file == nullptr || s.open_file(s.host_ctx, path.c_str(), &file_) != TROUPE_OK) {
        file_ = nullptr;
        throw plugin_error("params." + param_key + ": " + last_error(s));
    }
}

side_file::~side_file() {
    if (file_ != nullptr && s_->close_file != nullptr) s_->close_file(s_->host_ctx, file_);
}

void side_file::check_made_for(const target_model& target, const std::string& arch) const {
    std::string found;
    get_string(*s_, file_, "general.architecture", found);
    if (found != arch) {
        throw plugin_error(path_ + ": general.architecture is '" + found + "', expected '" + arch +
                           "' (a file written by troupe distill --kind " + arch + ")");
    }
    const std::string p = arch + ".target.";
    int64_t n_vocab = 0, dim = 0, n_layers = 0;
    std::string fingerprint;
    if (!get_int(*s_, file_, p + "n_vocab", n_vocab) || !get_int(*s_, file_, p + "dim", dim) ||
        !get_int(*s_, file_, p + "n_layers", n_layers) || !get_string(*s_, file_, p + "fingerprint", fingerprint)) {
        throw plugin_error(path_ + ": no " + p + "{fingerprint, n_vocab, dim, n_layers}: not a file made by troupe " +
                           "distill for a target");
    }
    const bool same_dims = n_vocab == target.n_vocab && dim == target.dim && n_layers == target.n_layers;
    const bool same_id = target.fingerprint.empty() || fingerprint == target.fingerprint;
    if (same_dims && same_id) return;
    throw plugin_error(path_ + ": made for another model (fingerprint " + fingerprint + ", " +
                       dims_text(n_vocab, dim, n_layers) + "), this target is " + target.describe());
}

int64_t side_file::integer(const std::string& key) const {
    int64_t v = 0;
    if (!get_int(*s_, file_, key, v)) throw plugin_error(path_ + ": no integer " + key);
    return v;
}

double side_file::number(const std::string& key) const {
    double v = 0;
    if (!get_float(*s_, file_, key, v)) throw plugin_error(path_ + ": no number " + key);
    return v;
}

float_matrix side_file::matrix(const std::string& name, const std::vector<int64_t>& expected) const {
    return float_matrix::read(*s_, file_, path_, name, expected);
}

const troupe_model_services& model_services(const troupe_plugin_params* params, const std::string& label) {
    if (params == nullptr || !TROUPE_HAS_FIELD(params, troupe_plugin_params, model) || params->model == nullptr ||
        params->model->tensor == nullptr || params->model->open_file == nullptr) {
        throw plugin_error(label + ": needs the target's tensors and side files (a host of ABI 2 that makes the " +
                           "instance for a model)");
    }
    return *params->model;
}

}  // namespace troupe::spec_common
