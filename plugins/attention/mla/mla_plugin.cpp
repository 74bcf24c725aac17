// attention/mla: multi-head latent attention (DeepSeek-V2, V2-Lite) over a paged cache of latent rows, float32 or
// F16 (kv.dtype), with tree calls for speculative verification. CPU only.
//
// The cache holds per token and layer only kv_lora_rank + rope_dim numbers (the normalised latent c_kv and the shared
// RoPE key), where MHA would hold 2 * n_heads * head_dim; keys and values are expanded from the latent with the
// layer's attn_kv_b, which the plugin reads through the model services at create (mla_model.h). Two paths compute
// the same attention (troupe_attention_call version 4, TROUPE_ATTENTION_FEATURE_MLA):
//   naive     expand every row read into per-head keys and values, then multi-head attention (mla_naive.h);
//   absorbed  fold W_UK into the query and W_UV into the output and attend in the latent space, the cache row
//             being the one key and its prefix the value (mla_absorbed.h).
// Parameters:
//   path:   auto | absorbed | naive   (default auto: per sequence of a step, the path with fewer multiply-adds by
//           the count below; absorbed for decoding, naive for long prefill chunks)
//   kernel: auto | scalar | avx2      (default auto: avx2 where the CPU has AVX2, FMA and F16C)
//
//   naive:    rows · H · (qk_nope + v) · R   +  tokens · rows · H · (qk_nope + rope + v)
//   absorbed: tokens · H · (qk_nope + v) · R +  tokens · rows · H · (2 R + rope)
#include <troupe/plugin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "mla_absorbed.h"
#include "mla_model.h"
#include "mla_naive.h"
#include "mla_step.h"
#include "plugins/common/plugin_support.h"

namespace {

using namespace troupe::plugin_support;
using troupe::mla::mla_model;
using troupe::mla::mla_shape;
using troupe::mla::mla_step;
using troupe::mla::vec_ops;

constexpr const char* source = "attention/mla";

enum class path_choice { automatic, absorbed, naive };

bool cpu_has_avx2() {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

}  // namespace

struct troupe_plugin_instance {
    mla_model model;
    const vec_ops* vec = nullptr;
    path_choice path = path_choice::automatic;
    std::mutex mutex;  // the scratch below belongs to one forward at a time
    troupe::mla::absorbed_scratch absorbed;
    troupe::mla::naive_scratch naive;
    std::vector<int32_t> absorbed_tokens, naive_tokens;
    std::string error;
};

namespace {

int32_t fail(troupe_plugin_instance* inst, int32_t code, std::string message) {
    inst->error = std::move(message);
    return code;
}

std::string num(int64_t x) {
    return std::to_string(x);
}

// The call's shape against the model the instance was made for.
int32_t check_shape(troupe_plugin_instance* inst, const troupe_attention_call& c) {
    const mla_shape& sh = inst->model.shape();
    if (c.kv_lora_rank <= 0) {
        return fail(inst, TROUPE_ERR_UNSUPPORTED,
                    "attention/mla takes multi-head latent attention calls only (kv_lora_rank > 0), got a call with "
                    "separate K and V heads: this model's attention is not latent, use attention/gqa");
    }
    if (c.softcap != 0.0f || c.window != 0) {
        return fail(inst, TROUPE_ERR_UNSUPPORTED,
                    "attention/mla does not soft-cap scores or attend within a window (softcap " +
                        std::to_string(c.softcap) + ", window " + num(c.window) + "; both must be 0)");
    }
    const bool same = c.n_heads == sh.n_heads && c.n_kv_heads == 1 && c.head_dim == sh.head_dim() &&
                      c.kv_lora_rank == sh.kv_lora_rank && c.rope_dim == sh.rope_dim && c.v_head_dim == sh.v_dim &&
                      c.layer >= 0 && c.layer < sh.n_layers;
    if (!same) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                    "MLA call for layer " + num(c.layer) + " with n_heads " + num(c.n_heads) + ", n_kv_heads " +
                        num(c.n_kv_heads) + ", head_dim " + num(c.head_dim) + ", kv_lora_rank " + num(c.kv_lora_rank) +
                        ", rope_dim " + num(c.rope_dim) + ", v_head_dim " + num(c.v_head_dim) +
                        " does not fit the model (" + sh.describe() + ": n_kv_heads 1, head_dim " + num(sh.head_dim()) +
                        ", layers 0.." + num(sh.n_layers - 1) + ")");
    }
    if (c.kv_type != TROUPE_KV_F32 && c.kv_type != TROUPE_KV_F16) {
        return fail(
            inst, TROUPE_ERR_INVALID_ARGUMENT,
            "attention call has kv_type " + num(c.kv_type) + ", expected TROUPE_KV_F32 (0) or TROUPE_KV_F16 (1)");
    }
    if (c.n_tokens < 0 || c.block_size <= 0 || c.n_seqs < 0) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                    "attention call has n_tokens " + num(c.n_tokens) + ", block_size " + num(c.block_size) +
                        ", n_seqs " + num(c.n_seqs) + "; block_size must be positive, the others >= 0");
    }
    if (c.rows != nullptr && (c.mask_base == nullptr || c.mask_words < 0 ||
                              c.mask_words > troupe::mla::max_mask_words || (c.mask_words > 0 && c.mask == nullptr))) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                    "tree attention call has mask_words " + num(c.mask_words) + "; expected mask_base, 0.." +
                        num(troupe::mla::max_mask_words) + " mask words and a mask when there are words");
    }
    return TROUPE_OK;
}

// Every token's sequence, rows and blocks.
int32_t check_tokens(troupe_plugin_instance* inst, const troupe_attention_call& c) {
    if (c.n_tokens == 0) return TROUPE_OK;
    if (!c.q || !c.k || !c.out || !c.positions || !c.seq_of || !c.block_tables || !c.k_pool) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                    "MLA attention call has a null pointer among q, k (the latent), out, positions, seq_of, "
                    "block_tables and k_pool (the latent cache; v and v_pool are unused)");
    }
    for (int32_t t = 0; t < c.n_tokens; ++t) {
        const std::string token = "token " + num(t);
        const int32_t s = c.seq_of[t];
        if (s < 0 || s >= c.n_seqs || c.block_tables[s] == nullptr) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        token + " belongs to sequence " + num(s) + ", expected 0.." + num(c.n_seqs - 1) +
                            " with a block table");
        }
        if (c.positions[t] < 0)
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, token + " has position " + num(c.positions[t]));
        // The highest cache row the token writes or reads.
        int32_t last = c.positions[t];
        if (c.rows != nullptr) {
            int32_t highest_bit = -1;
            for (int32_t w = 0; w < c.mask_words; ++w) {
                const uint64_t bits = c.mask[static_cast<size_t>(t) * c.mask_words + w];
                if (bits != 0) highest_bit = 64 * w + 63 - __builtin_clzll(bits);
            }
            if (c.rows[t] < 0 || c.mask_base[t] < 0 || (c.mask_base[t] == 0 && highest_bit < 0)) {
                return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                            "tree attention: " + token + " has row " + num(c.rows[t]) + ", mask_base " +
                                num(c.mask_base[t]) + (highest_bit < 0 ? " and no mask bit" : "") +
                                "; rows must be >= 0 and the token must read at least one row (itself)");
            }
            last = std::max({c.rows[t], c.mask_base[t] - 1, highest_bit < 0 ? 0 : c.mask_base[t] + highest_bit});
        }
        for (int32_t b = 0; b <= last / c.block_size; ++b) {
            if (c.block_tables[s][b] < 0) {
                return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                            token + " at position " + num(c.positions[t]) + " reads block " +
                                num(c.block_tables[s][b]) + " (entry " + num(b) + " of sequence " + num(s) +
                                "'s table)");
            }
        }
    }
    return TROUPE_OK;
}

// Splits the call's tokens between the paths: per sequence, the one with fewer multiply-adds (file comment).
void choose_paths(troupe_plugin_instance* inst, const mla_step& s) {
    const troupe_attention_call& c = s.call;
    inst->absorbed_tokens.clear();
    inst->naive_tokens.clear();
    if (inst->path != path_choice::automatic) {
        auto& all = inst->path == path_choice::absorbed ? inst->absorbed_tokens : inst->naive_tokens;
        for (int32_t t = 0; t < c.n_tokens; ++t) all.push_back(t);
        return;
    }
    const mla_shape& sh = s.shape();
    const double heads = sh.n_heads, rank = sh.kv_lora_rank, kv_b = sh.kv_b_rows_per_head();
    std::vector<int64_t> tokens(static_cast<size_t>(c.n_seqs), 0), rows(static_cast<size_t>(c.n_seqs), 0);
    int32_t extra[troupe::mla::max_extra_rows];
    for (int32_t t = 0; t < c.n_tokens; ++t) {
        const auto q = static_cast<size_t>(c.seq_of[t]);
        ++tokens[q];
        const int32_t n_extra = s.extra_rows(t, extra);
        rows[q] =
            std::max<int64_t>(rows[q], n_extra > 0 ? std::max(s.n_prefix(t), extra[n_extra - 1] + 1) : s.n_prefix(t));
    }
    std::vector<bool> naive(static_cast<size_t>(c.n_seqs), false);
    for (size_t q = 0; q < naive.size(); ++q) {
        const double n = static_cast<double>(tokens[q]), r = static_cast<double>(rows[q]);
        const double naive_macs = r * heads * kv_b * rank + n * r * heads * (sh.head_dim() + sh.v_dim);
        const double absorbed_macs = n * heads * kv_b * rank + n * r * heads * (2 * rank + sh.rope_dim);
        naive[q] = naive_macs < absorbed_macs;
    }
    for (int32_t t = 0; t < c.n_tokens; ++t)
        (naive[static_cast<size_t>(c.seq_of[t])] ? inst->naive_tokens : inst->absorbed_tokens).push_back(t);
}

int32_t mla_forward(troupe_plugin_instance* inst, const troupe_attention_call* call, const troupe_parallel* par) {
    inst->error.clear();
    return guarded(inst->error, [&]() -> int32_t {
        if (call == nullptr || !TROUPE_HAS_FIELD(call, troupe_attention_call, v_head_dim)) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "attention/mla needs an attention call of version 4 (the MLA fields), got " +
                            std::string(call == nullptr ? "none" : "an older one"));
        }
        const troupe_attention_call& c = *call;
        if (const int32_t rc = check_shape(inst, c); rc != TROUPE_OK) return rc;
        if (const int32_t rc = check_tokens(inst, c); rc != TROUPE_OK) return rc;
        const std::lock_guard<std::mutex> lock(inst->mutex);
        const mla_step s{c, inst->model, *inst->vec};
        const int32_t lw = s.shape().latent_width();
        // The step's latent rows first: a token reads the rows of earlier tokens of the same step.
        int32_t rc = run_parallel(par, c.n_tokens, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) {
                const auto ti = static_cast<int32_t>(t);
                s.vec.store(c.k + static_cast<size_t>(t) * lw, s.f16(),
                            s.latent_row_for_write(c.seq_of[ti], s.write_row(ti)), lw);
            }
        });
        if (rc != TROUPE_OK) return fail(inst, rc, "writing latent rows failed in the host's parallel_for");
        choose_paths(inst, s);
        rc = troupe::mla::run_absorbed(s, inst->absorbed_tokens.data(),
                                       static_cast<int32_t>(inst->absorbed_tokens.size()), inst->absorbed, par);
        if (rc == TROUPE_OK) {
            rc = troupe::mla::run_naive(s, inst->naive_tokens.data(), static_cast<int32_t>(inst->naive_tokens.size()),
                                        inst->naive, par);
        }
        if (rc != TROUPE_OK) return fail(inst, rc, "MLA attention failed in the host's parallel_for");
        return TROUPE_OK;
    });
}

int32_t mla_score(int32_t backend) {
    return backend == TROUPE_BACKEND_CPU ? 50 : -1;
}

int32_t mla_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    std::string error;
    *out = nullptr;
    const int32_t rc = guarded(error, [&]() -> int32_t {
        param_reader reader(params);
        const std::string path = reader.choice("path", {"auto", "absorbed", "naive"}, "auto");
        const std::string kernel = reader.choice("kernel", {"auto", "scalar", "avx2"}, "auto");
        if (kernel == "avx2" && !cpu_has_avx2())
            reader.fail("kernel", "avx2 requested but this CPU lacks AVX2/FMA/F16C");
        if (const std::string& errors = reader.finish({"path", "kernel"}); !errors.empty()) {
            error = errors;
            return TROUPE_ERR_INVALID_PARAMS;
        }
        if (params != nullptr && TROUPE_HAS_FIELD(params, troupe_plugin_params, backend) &&
            params->backend != TROUPE_BACKEND_CPU) {
            error = "attention/mla: backend " + num(params->backend) + " is not supported (CPU only)";
            return TROUPE_ERR_UNSUPPORTED;
        }
        if (params == nullptr || !TROUPE_HAS_FIELD(params, troupe_plugin_params, model) || params->model == nullptr) {
            error = "attention/mla: needs the model's tensors (its attn_kv_b matrices), but was made without a model";
            return TROUPE_ERR_UNSUPPORTED;
        }
        auto* inst = new troupe_plugin_instance;
        try {
            inst->model = mla_model::read(*params->model, source);
        } catch (const troupe::spec_common::plugin_error& e) {  // the model is not one this plugin runs: say so as is
            delete inst;
            error = e.what();
            return TROUPE_ERR_UNSUPPORTED;
        } catch (...) {
            delete inst;
            throw;
        }
        inst->path = path == "absorbed" ? path_choice::absorbed
                     : path == "naive"  ? path_choice::naive
                                        : path_choice::automatic;
        const bool avx2 = kernel == "avx2" || (kernel == "auto" && cpu_has_avx2());
        inst->vec = avx2 ? &troupe::mla::avx2_vec_ops() : &troupe::mla::scalar_vec_ops();
        host_log::write(TROUPE_LOG_LEVEL_INFO, source, "%s; %s; path %s, %s kernels",
                        inst->model.shape().describe().c_str(), inst->model.describe_kv_b().c_str(), path.c_str(),
                        inst->vec->name);
        *out = inst;
        return TROUPE_OK;
    });
    set_create_error(error);
    return rc;
}

void mla_destroy(troupe_plugin_instance* inst) {
    delete inst;
}

const char* mla_error_message(const troupe_plugin_instance* inst) {
    return inst != nullptr ? inst->error.c_str() : create_error_buffer();
}

const troupe_attention_ops mla_ops = {
    sizeof(troupe_attention_ops),
    TROUPE_ATTENTION_OPS_VERSION,
    mla_forward,
    TROUPE_KV_TYPE_BIT(TROUPE_KV_F32) | TROUPE_KV_TYPE_BIT(TROUPE_KV_F16),
    1,  // trees
    TROUPE_ATTENTION_FEATURE_MLA,
};

const troupe_plugin_descriptor mla_descriptor = {
    sizeof(troupe_plugin_descriptor),
    TROUPE_PLUGIN_DESCRIPTOR_VERSION,
    TROUPE_PLUGIN_ABI_VERSION,
    TROUPE_PLUGIN_KIND_ATTENTION,
    "mla",
    "1.0.0",
    "multi-head latent attention (DeepSeek-V2) over a paged F32 or F16 latent cache: absorbed and naive paths, "
    "tree calls (CPU: scalar, AVX2)",
    mla_score,
    mla_create,
    mla_destroy,
    mla_error_message,
    &mla_ops,
    nullptr,
    nullptr,
    nullptr,  // kv
    nullptr,  // quantize
    nullptr,  // taps
};

}  // namespace

extern "C" TROUPE_PLUGIN_EXPORT const troupe_plugin_descriptor* troupe_plugin_query(uint32_t host_abi_min,
                                                                                    uint32_t host_abi_max,
                                                                                    const troupe_host_services* host) {
    host_log::attach(host);
    return &mla_descriptor;
}
