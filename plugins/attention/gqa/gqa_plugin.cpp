// attention/gqa: causal attention over a paged KV cache (float32 or F16 pools: kv.dtype) for MHA, MQA and GQA
// (the group size is n_heads / n_kv_heads of each call, i.e. of the model), and tree attention for verifying a
// tree of draft tokens (troupe_attention_call version 3; attention_kernels.h), with attention soft-capping and
// sliding windows (version 4: ops.features SOFTCAP | WINDOW; Gemma 2, Mistral, Phi-3). CPU only.
//
// Parameters:
//   kernel: auto | scalar | avx2 | avx512   (default auto: the widest the CPU has)
//   numerics: fast | ggml                   (default fast; ggml: llama.cpp's CPU attention arithmetic bit for bit,
//                                            attention_ggml.h, for calls without tree rows; needs FMA)
//
// This file is also the example for third-party authors (plugins/README.md): one exported entry point,
// a static descriptor, create/destroy, error strings, and the attention op table.
#include <troupe/plugin.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "attention_ggml.h"
#include "attention_kernels.h"
#include "plugins/common/plugin_support.h"

namespace {

using namespace troupe::plugin_support;
using troupe::gqa::attend_groups_avx2;
using troupe::gqa::attend_groups_avx512;
using troupe::gqa::attend_ref;
using troupe::gqa::attend_tiles_avx2;
using troupe::gqa::attend_tiles_avx512;
using troupe::gqa::max_extra_rows;
using troupe::gqa::max_mask_words;

constexpr const char* source = "attention/gqa";

using attend_fn = void (*)(const troupe_attention_call&, int64_t, int64_t);
using write_kv_fn = void (*)(const troupe_attention_call&, int64_t, int64_t);
using attend_groups_fn = void (*)(const troupe_attention_call&, const troupe::gqa::token_group*, const int32_t*,
                                  int64_t, int64_t);
using attend_tiles_fn = void (*)(const troupe_attention_call&, const troupe::gqa::query_tile*, int32_t, int64_t,
                                 int64_t);
using attend_parts_fn = void (*)(const troupe_attention_call&, const troupe::gqa::key_part*, const int32_t*, float*,
                                 float*, float*, int64_t, int64_t);

bool cpu_has_avx2() {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
bool cpu_has_avx512() {
    return __builtin_cpu_supports("avx512f");
}

}  // namespace

struct troupe_plugin_instance {
    std::string kernel;                        // "scalar", "avx2" or "avx512"
    write_kv_fn write_kv = nullptr;            // the step's K/V rows into the pools (scalar or vector conversions)
    attend_fn attend = nullptr;                // scalar: items (token, kv head)
    attend_tiles_fn attend_tiles = nullptr;    // SIMD: items (kv head, query tile)
    attend_groups_fn attend_groups = nullptr;  // SIMD: items (token group, kv head) of the tokens of small tiles
    attend_parts_fn attend_parts = nullptr;    // SIMD: items key parts of the long per-token tokens
    int32_t tile_lanes = 1;                    // query rows per pass of attend_tiles
    bool ggml_numerics = false;                // numerics: ggml (attend_ggml for calls without tree rows)
    std::string error;
};

namespace {

int32_t fail(troupe_plugin_instance* inst, int32_t code, std::string message) {
    inst->error = std::move(message);
    return code;
}

// A tree call's token t (attention_kernels.h): a row, a prefix and mask bits that name at least one row to attend
// to; `last` becomes the highest row it writes or reads.
int32_t check_tree_token(troupe_plugin_instance* inst, const troupe_attention_call* c, int32_t t, int32_t& last) {
    const std::string token = "tree attention: token " + std::to_string(t);
    if (c->rows[t] < 0 || c->mask_base[t] < 0) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                    token + " has row " + std::to_string(c->rows[t]) + " and mask_base " +
                        std::to_string(c->mask_base[t]) + "; both must be >= 0");
    }
    int32_t highest_bit = -1;
    for (int32_t w = 0; w < c->mask_words; ++w) {
        const uint64_t bits = c->mask[static_cast<size_t>(t) * c->mask_words + w];
        if (bits != 0) highest_bit = 64 * w + 63 - __builtin_clzll(bits);
    }
    if (c->mask_base[t] == 0 && highest_bit < 0) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                    token + " attends to no row (mask_base 0 and no mask bit); it should see at least itself");
    }
    last = std::max({c->rows[t], c->mask_base[t] - 1, highest_bit < 0 ? 0 : c->mask_base[t] + highest_bit});
    return TROUPE_OK;
}

// Checks what the kernels rely on; the message names the field and says what would be right.
// (c is the call normalized by gqa_forward: kv_type filled in for a version 1 host.)
int32_t check_call(troupe_plugin_instance* inst, const troupe_attention_call* c) {
    if (c->kv_type != TROUPE_KV_F32 && c->kv_type != TROUPE_KV_F16) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                    "attention call has kv_type " + std::to_string(c->kv_type) + ", expected TROUPE_KV_F32 (" +
                        std::to_string(TROUPE_KV_F32) + ") or TROUPE_KV_F16 (" + std::to_string(TROUPE_KV_F16) + ")");
    }
    if (c->n_tokens < 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 || c->head_dim <= 0 || c->block_size <= 0) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                    "attention call has n_tokens " + std::to_string(c->n_tokens) + ", n_heads " +
                        std::to_string(c->n_heads) + ", n_kv_heads " + std::to_string(c->n_kv_heads) + ", head_dim " +
                        std::to_string(c->head_dim) + ", block_size " + std::to_string(c->block_size) +
                        "; all must be positive (n_tokens may be 0)");
    }
    if (c->n_heads % c->n_kv_heads != 0) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                    "n_heads " + std::to_string(c->n_heads) + " is not a multiple of n_kv_heads " +
                        std::to_string(c->n_kv_heads));
    }
    if (c->head_dim > troupe::gqa::max_head_dim) {
        return fail(inst, TROUPE_ERR_UNSUPPORTED,
                    "head_dim " + std::to_string(c->head_dim) + " is above the supported " +
                        std::to_string(troupe::gqa::max_head_dim));
    }
    if (c->rows != nullptr && (c->mask_base == nullptr || c->mask_words < 0 || c->mask_words > max_mask_words ||
                               (c->mask_words > 0 && c->mask == nullptr))) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                    "tree attention call has mask_words " + std::to_string(c->mask_words) +
                        (c->mask_base == nullptr ? " and no mask_base" : "") +
                        (c->mask_words > 0 && c->mask == nullptr ? " and no mask" : "") + "; expected mask_base, 0.." +
                        std::to_string(max_mask_words) + " mask words (trees of up to " +
                        std::to_string(max_extra_rows) + " nodes) and a mask when there are words");
    }
    if (c->window < 0 || !(c->softcap >= 0.0f) || c->softcap > 1e30f) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                    "attention call has window " + std::to_string(c->window) + " and softcap " +
                        std::to_string(c->softcap) + "; expected a window >= 0 and a finite softcap >= 0 (0: none)");
    }
    if (c->kv_lora_rank != 0) {
        return fail(inst, TROUPE_ERR_UNSUPPORTED,
                    "attention call is MLA (kv_lora_rank " + std::to_string(c->kv_lora_rank) +
                        "), which attention/gqa does not do (attention/mla does)");
    }
    if (c->n_tokens == 0) return TROUPE_OK;
    if (!c->q || !c->k || !c->v || !c->out || !c->positions || !c->seq_of || !c->block_tables || !c->k_pool ||
        !c->v_pool) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "attention call has a null pointer");
    }
    for (int32_t t = 0; t < c->n_tokens; ++t) {
        const int32_t s = c->seq_of[t];
        if (s < 0 || s >= c->n_seqs || c->block_tables[s] == nullptr) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "token " + std::to_string(t) + " belongs to sequence " + std::to_string(s) + ", expected 0.." +
                            std::to_string(c->n_seqs - 1) + " with a block table");
        }
        if (c->positions[t] < 0) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "token " + std::to_string(t) + " has position " + std::to_string(c->positions[t]));
        }
        // The highest cache row the token writes or reads: its position (rows 0..p), or in a tree call its row and
        // the last row of its prefix and of its mask.
        int32_t last = c->positions[t];
        if (c->rows != nullptr) {
            if (const int32_t rc = check_tree_token(inst, c, t, last); rc != TROUPE_OK) return rc;
        }
        // Every block the token reads or writes must be a real block (with a sliding window, from its window's
        // first row on: blocks wholly before it may have been released).
        for (int32_t b = troupe::gqa::first_key(*c, t) / c->block_size; b <= last / c->block_size; ++b) {
            const int32_t block = c->block_tables[s][b];
            if (block < 0) {
                return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                            "token " + std::to_string(t) + " at position " + std::to_string(c->positions[t]) +
                                " reads block " + std::to_string(block) + " (entry " + std::to_string(b) +
                                " of sequence " + std::to_string(s) + "'s table)");
            }
        }
    }
    return TROUPE_OK;
}

// The per-token tokens (decodes, speculative steps' tokens), first grouped: tokens of one sequence with the same first
// key (token_groups.h: a speculative step's last accepted token and its drafts). Those with at least split_min_keys
// keys, plainly causal or tree drafts, are split over their positions (key_split.h) and merged: the parts inside the
// prefix rows all of a group's split tokens see are shared parts, computed once for all of them. The others take
// attend_groups, a group's tokens together.
int32_t attend_single(const troupe_plugin_instance* inst, const troupe_attention_call& c, const troupe_parallel* par,
                      std::vector<int32_t>& single) {
    namespace gqa = troupe::gqa;
    std::vector<gqa::token_group> groups(single.size());
    const int32_t max_tokens = std::max(1, gqa::rows_per_pass / (c.n_heads / c.n_kv_heads));
    const int32_t n_groups =
        gqa::make_token_groups(c, single.data(), static_cast<int32_t>(single.size()), max_tokens, groups.data());
    std::vector<gqa::key_part> parts;
    std::vector<int32_t> shared_tokens;  // the split tokens of each group with shared parts
    std::vector<int32_t> split;          // split tokens, in merge order
    std::vector<int32_t> slots;          // each split token's part slots, in key order
    std::vector<int32_t> slots_first;    // [split tokens + 1]: where each token's slots begin
    std::vector<int32_t> unsplit;        // the other tokens, by group
    std::vector<gqa::token_group> unsplit_groups;
    std::vector<int32_t> long_ones;  // a group's split tokens (reused: this runs per layer)
    int32_t n_slots = 0;
    for (int32_t g = 0; g < n_groups; ++g) {
        const int32_t* toks = single.data() + groups[static_cast<size_t>(g)].first;
        const int32_t n = groups[static_cast<size_t>(g)].n_tokens;
        long_ones.clear();
        const auto unsplit_first = static_cast<int32_t>(unsplit.size());
        for (int32_t i = 0; i < n; ++i) {
            (gqa::key_count(c, toks[i]) < gqa::split_min_keys ? unsplit : long_ones).push_back(toks[i]);
        }
        if (static_cast<int32_t>(unsplit.size()) > unsplit_first) {
            unsplit_groups.push_back({unsplit_first, static_cast<int32_t>(unsplit.size()) - unsplit_first});
        }
        if (long_ones.empty()) continue;
        // Parts wholly inside the prefix rows every long token sees are shared (with two or more of them).
        int32_t n_shared = 0;
        if (long_ones.size() > 1) {
            const int32_t first = gqa::first_key(c, long_ones[0]);
            int32_t common = INT32_MAX;
            for (const int32_t t : long_ones) common = std::min(common, gqa::prefix_rows(c, t) - first);
            n_shared = common / gqa::split_part_keys;
        }
        const auto shared_first = static_cast<int32_t>(shared_tokens.size());
        const auto n_long = static_cast<int32_t>(long_ones.size());
        if (n_shared > 0) shared_tokens.insert(shared_tokens.end(), long_ones.begin(), long_ones.end());
        const int32_t shared_slot = n_slots;
        for (int32_t i = 0; i < n_shared; ++i) {
            gqa::key_part part = gqa::key_part_of(c, long_ones[0], gqa::key_count(c, long_ones[0]), i);
            part.token = shared_first;
            part.slot = n_slots;
            part.n_tokens = n_long;
            parts.push_back(part);
            n_slots += n_long;
        }
        for (int32_t j = 0; j < n_long; ++j) {
            const int32_t t = long_ones[static_cast<size_t>(j)];
            split.push_back(t);
            slots_first.push_back(static_cast<int32_t>(slots.size()));
            for (int32_t i = 0; i < n_shared; ++i) slots.push_back(shared_slot + i * n_long + j);
            const int32_t n_keys = gqa::key_count(c, t);
            for (int32_t i = n_shared; i < gqa::key_part_count(n_keys); ++i) {
                gqa::key_part part = gqa::key_part_of(c, t, n_keys, i);
                part.slot = n_slots++;
                slots.push_back(part.slot);
                parts.push_back(part);
            }
        }
    }
    slots_first.push_back(static_cast<int32_t>(slots.size()));
    int32_t rc = TROUPE_OK;
    if (!parts.empty()) {
        std::vector<float> part_out(static_cast<size_t>(n_slots) * c.n_heads * c.head_dim);  // [slots, heads, hd]
        std::vector<float> part_m(static_cast<size_t>(n_slots) * c.n_heads);                 // [slots, heads]
        std::vector<float> part_l(part_m.size());                                            // [slots, heads]
        const attend_parts_fn attend_parts = inst->attend_parts;
        rc = run_parallel(par, static_cast<int64_t>(parts.size()), [&](int64_t b, int64_t e) {
            attend_parts(c, parts.data(), shared_tokens.data(), part_out.data(), part_m.data(), part_l.data(), b, e);
        });
        if (rc == TROUPE_OK) {
            rc = run_parallel(par, static_cast<int64_t>(split.size()), [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) {
                    troupe::gqa::merge_key_parts(c, split[i], slots.data() + slots_first[i],
                                                 slots_first[i + 1] - slots_first[i], part_out.data(), part_m.data(),
                                                 part_l.data());
                }
            });
        }
    }
    if (rc == TROUPE_OK && !unsplit.empty()) {
        const attend_groups_fn attend_groups = inst->attend_groups;
        rc = run_parallel(par, static_cast<int64_t>(unsplit_groups.size()) * c.n_kv_heads,
                          [&c, attend_groups, &unsplit_groups, &unsplit](int64_t b, int64_t e) {
                              attend_groups(c, unsplit_groups.data(), unsplit.data(), b, e);
                          });
    }
    return rc;
}

int32_t gqa_forward(troupe_plugin_instance* inst, const troupe_attention_call* call, const troupe_parallel* par) {
    inst->error.clear();
    return guarded(inst->error, [&]() -> int32_t {
        // A version 1 call (a host built before kv_type) is the same call with float32 pools.
        constexpr size_t v1_size = offsetof(troupe_attention_call, kv_type);
        if (call == nullptr || call->struct_size < v1_size) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "attention call is null or older than this plugin's");
        }
        troupe_attention_call c{};
        std::memcpy(&c, call, std::min<size_t>(call->struct_size, sizeof c));
        if (!TROUPE_HAS_FIELD(call, troupe_attention_call, kv_type)) c.kv_type = TROUPE_KV_F32;
        if (const int32_t rc = check_call(inst, &c); rc != TROUPE_OK) return rc;
        const write_kv_fn write_kv = inst->write_kv;
        int32_t rc = run_parallel(par, c.n_tokens, [&c, write_kv](int64_t b, int64_t e) { write_kv(c, b, e); });
        if (rc != TROUPE_OK) return fail(inst, rc, "writing K/V rows failed in the host's parallel_for");
        if (inst->ggml_numerics && c.rows == nullptr) {
            rc = run_parallel(par, static_cast<int64_t>(c.n_tokens) * c.n_kv_heads,
                              [&c](int64_t b, int64_t e) { troupe::gqa::attend_ggml(c, b, e); });
        } else if (const attend_tiles_fn attend_tiles = inst->attend_tiles; attend_tiles != nullptr) {
            const int32_t group = c.n_heads / c.n_kv_heads;
            std::vector<troupe::gqa::query_tile> tiles(static_cast<size_t>(c.n_tokens));
            const int32_t n_made =
                troupe::gqa::make_query_tiles(c, std::max(1, inst->tile_lanes / group), tiles.data());
            // Each sequence's plainly causal tokens in this call: a sequence with few (a decode, a speculative step's
            // chain, the token a tree of drafts follows) has each token computed as a one-token decode would be
            // (attention_kernels.h: verify_tokens_max); a tree's drafts do not count, they never take tiles.
            std::vector<int32_t> tokens_of(static_cast<size_t>(c.n_seqs), 0);
            for (int32_t t = 0; t < c.n_tokens; ++t) {
                if (troupe::gqa::plain_causal(c, t)) ++tokens_of[static_cast<size_t>(c.seq_of[t])];
            }
            // Tiles of prefill chunks that fill the lanes stay tiles (items kv head-major: a thread's consecutive
            // tiles of one sequence reuse that head's K/V in cache); the other tokens go to the per-token kernel,
            // items token-major (a thread's kv heads of one token are one pass over contiguous rows), or are split
            // over their positions from split_min_keys keys on (attend_single: the threads share a long token's keys).
            std::vector<int32_t> single;  // tokens of the small tiles
            int32_t n_tiles = 0;
            for (int32_t i = 0; i < n_made; ++i) {
                const troupe::gqa::query_tile& tile = tiles[static_cast<size_t>(i)];
                // A tree call's draft tokens are tiles of one; they take the per-token kernel, which walks their
                // own rows (attention_kernels.h).
                const bool prefill_chunk =
                    tokens_of[static_cast<size_t>(c.seq_of[tile.first_token])] > troupe::gqa::verify_tokens_max;
                if (prefill_chunk && troupe::gqa::fills_lanes(tile, group, c.head_dim, inst->tile_lanes) &&
                    troupe::gqa::plain_causal(c, tile.first_token)) {
                    tiles[static_cast<size_t>(n_tiles++)] = tile;  // keeps their costliest-first order
                } else {
                    for (int32_t t = tile.first_token; t < tile.first_token + tile.n_tokens; ++t) single.push_back(t);
                }
            }
            if (n_tiles > 0) {
                rc = run_parallel(par, static_cast<int64_t>(n_tiles) * c.n_kv_heads,
                                  [&c, attend_tiles, &tiles, n_tiles](int64_t b, int64_t e) {
                                      attend_tiles(c, tiles.data(), n_tiles, b, e);
                                  });
            }
            if (rc == TROUPE_OK && !single.empty()) rc = attend_single(inst, c, par, single);
        } else {
            const attend_fn attend = inst->attend;
            rc = run_parallel(par, static_cast<int64_t>(c.n_tokens) * c.n_kv_heads,
                              [&c, attend](int64_t b, int64_t e) { attend(c, b, e); });
        }
        if (rc != TROUPE_OK) return fail(inst, rc, "attention failed in the host's parallel_for");
        return TROUPE_OK;
    });
}

int32_t gqa_score(int32_t backend) {
    return backend == TROUPE_BACKEND_CPU ? 50 : -1;
}

int32_t gqa_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    std::string error;
    *out = nullptr;
    const int32_t rc = guarded(error, [&]() -> int32_t {
        param_reader reader(params);
        const std::string kernel = reader.choice("kernel", {"auto", "scalar", "avx2", "avx512"}, "auto");
        const std::string numerics = reader.choice("numerics", {"fast", "ggml"}, "fast");
        if (numerics == "ggml" && !__builtin_cpu_supports("fma")) {
            reader.fail("numerics", "ggml requested but this CPU lacks FMA (llama.cpp's roundings need it)");
        }
        if (kernel == "avx2" && !cpu_has_avx2())
            reader.fail("kernel", "avx2 requested but this CPU lacks AVX2/FMA/F16C");
        if (kernel == "avx512" && !cpu_has_avx512()) {
            reader.fail("kernel", "avx512 requested but this CPU lacks AVX-512F");
        }
        if (params != nullptr && TROUPE_HAS_FIELD(params, troupe_plugin_params, backend) &&
            params->backend != TROUPE_BACKEND_CPU) {
            error = "backend " + std::to_string(params->backend) + " is not supported (CPU only)";
            return TROUPE_ERR_UNSUPPORTED;
        }
        if (const std::string& errors = reader.finish({"kernel", "numerics"}); !errors.empty()) {
            error = errors;
            return TROUPE_ERR_INVALID_PARAMS;
        }
        auto* inst = new troupe_plugin_instance;
        if (kernel == "avx512" || (kernel == "auto" && cpu_has_avx512())) {
            inst->kernel = "avx512";
            inst->write_kv = troupe::gqa::write_kv_avx512;
            inst->attend_tiles = attend_tiles_avx512;
            inst->attend_groups = attend_groups_avx512;
            inst->attend_parts = troupe::gqa::attend_parts_avx512;
            inst->tile_lanes = troupe::gqa::avx512_lanes;
        } else if (kernel == "avx2" || (kernel == "auto" && cpu_has_avx2())) {
            inst->kernel = "avx2";
            inst->write_kv = troupe::gqa::write_kv_avx2;
            inst->attend_tiles = attend_tiles_avx2;
            inst->attend_groups = attend_groups_avx2;
            inst->attend_parts = troupe::gqa::attend_parts_avx2;
            inst->tile_lanes = troupe::gqa::avx2_lanes;
        } else {
            inst->kernel = "scalar";
            inst->write_kv = troupe::gqa::write_kv;
            inst->attend = attend_ref;
        }
        inst->ggml_numerics = numerics == "ggml";
        host_log::write(TROUPE_LOG_LEVEL_INFO, source, "using the %s kernels%s", inst->kernel.c_str(),
                        inst->ggml_numerics ? " (ggml's numerics outside tree calls)" : "");
        *out = inst;
        return TROUPE_OK;
    });
    set_create_error(error);
    return rc;
}

void gqa_destroy(troupe_plugin_instance* inst) {
    delete inst;
}

const char* gqa_error_message(const troupe_plugin_instance* inst) {
    return inst != nullptr ? inst->error.c_str() : create_error_buffer();
}

const troupe_attention_ops gqa_ops = {
    sizeof(troupe_attention_ops),
    TROUPE_ATTENTION_OPS_VERSION,
    gqa_forward,
    TROUPE_KV_TYPE_BIT(TROUPE_KV_F32) | TROUPE_KV_TYPE_BIT(TROUPE_KV_F16),
    1,  // trees
    TROUPE_ATTENTION_FEATURE_SOFTCAP | TROUPE_ATTENTION_FEATURE_WINDOW,
};

const troupe_plugin_descriptor gqa_descriptor = {
    sizeof(troupe_plugin_descriptor),
    TROUPE_PLUGIN_DESCRIPTOR_VERSION,
    TROUPE_PLUGIN_ABI_VERSION,
    TROUPE_PLUGIN_KIND_ATTENTION,
    "gqa",
    "1.0.0",
    "causal and tree attention over a paged F32 or F16 KV cache: MHA, MQA and GQA (CPU: scalar, AVX2, AVX-512)",
    gqa_score,
    gqa_create,
    gqa_destroy,
    gqa_error_message,
    &gqa_ops,
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
    return &gqa_descriptor;
}
