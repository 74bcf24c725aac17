/*
 * troupe plugin SDK: the whole C ABI between the troupe host and a plugin shared object.
 *
 * C11, no C++ types, nothing thrown across. Rules that keep old plugins and new hosts (and the
 * reverse) working together:
 *
 *   - Every struct that crosses the boundary begins with `struct_size` (sizeof as the writer compiled
 *     it) and `version` (the struct's own version). Structs grow only by appending fields; a reader
 *     uses a field only when `struct_size` says the writer's struct contains it (TROUPE_HAS_FIELD).
 *   - A null function pointer means "not provided".
 *   - Functions that can fail return an int32_t status (TROUPE_OK = 0). The message of the last failure
 *     is read with the descriptor's `error_message(instance)`; `error_message(NULL)` returns the last
 *     failure of `create` on the calling thread.
 *   - Memory is freed by whoever allocated it: instances by `destroy`, prepared weights by `release`.
 *   - Strings are UTF-8, NUL-terminated, and owned by whoever passes them; copy what you keep.
 *
 * A plugin exports exactly one symbol, the negotiation entry point (build with -fvisibility=hidden):
 *
 *   TROUPE_PLUGIN_EXPORT const troupe_plugin_descriptor*
 *   troupe_plugin_query(uint32_t host_abi_min, uint32_t host_abi_max, const troupe_host_services* host);
 *
 * The host calls it once after dlopen with the range of ABI versions it speaks and its services (a log
 * callback and a parallel_for over its worker pool; both valid until the library is closed). The plugin
 * returns a static descriptor: kind, name, versions, an optional score ("can I run on this backend"),
 * create/destroy of an instance from parameters, error strings, and the op table of its kind. The host
 * refuses a descriptor whose abi_version is outside its range and says both versions.
 *
 *   host                                   plugin
 *   dlopen(lib, RTLD_LOCAL) ──────────────►
 *   troupe_plugin_query(1, 1, &services) ─► descriptor {kind, name, abi_version, score, create, ops...}
 *   create(&params, &instance) ───────────► validates params ("params.max_draft: must be ...")
 *   ops->forward(instance, &call, &par) ──► runs, calling par->parallel_for for the heavy part
 *   destroy(instance); dlclose ───────────►
 *
 * Parameters: the plugin's YAML sub-tree, flattened into (dotted key, value string) pairs relative to
 * the plugin's `params` node (`ngram_max` = "3", `lists.0` = "a"), plus the same sub-tree as YAML text
 * for plugins that prefer to parse it themselves. A plugin validates its own keys: unknown keys and
 * bad values fail `create` with a message that names the key as `params.<key>`, e.g.
 * "params.max_draft: must be between 1 and 16, got 40".
 */
#ifndef TROUPE_PLUGIN_H
#define TROUPE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/kv.h"
#include "troupe/quantize.h"
#include "troupe/spec.h"
#include "troupe/taps.h"
#include "troupe/tensors.h"
#include "troupe/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ABI version of this header. The host speaks a range; a plugin reports the one it was built with.
 *   1: attention, quant (runtime matmul), spec.
 *   2 (SDK 2): the public type ids and block layouts (types.h); taps (taps.h); tensors by name and side files
 *      (tensors.h, troupe_plugin_params.model); KV plugins that own their cache layout (kv.h, kind KV); offline
 *      quantization methods (quantize.h); ops carry the backend and the lane's stream (troupe_parallel);
 *      speculative decoding with sequence lifecycles, batched tree proposals with draft probabilities (spec.h),
 *      tree attention (troupe_attention_call version 3) and a second model run by the host (tensors.h).
 *   Within 2, structs grow by versions: troupe_parallel 3 (parallel_ranges), 4 (parallel_shares, n_threads);
 *      troupe_quant_ops 2 (weights placed by the host in one region per thread: placement_rows, placed_bytes, place).
 * A version-1 plugin keeps loading: the host reads only the fields its structs have (TROUPE_HAS_FIELD). */
#define TROUPE_PLUGIN_ABI_VERSION 2u

/* Name of the negotiation entry point every plugin exports. */
#define TROUPE_PLUGIN_ENTRY_POINT "troupe_plugin_query"

#if defined(_WIN32)
#define TROUPE_PLUGIN_EXPORT __declspec(dllexport)
#else
#define TROUPE_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* Whether a struct written with `struct_size` bytes contains `field` (read newer fields only then). */
#define TROUPE_HAS_FIELD(ptr, type, field) \
    ((ptr)->struct_size >= offsetof(type, field) + sizeof(((const type*)0)->field))

/* ---- status codes ------------------------------------------------------------------------------ */

enum {
    TROUPE_OK = 0,
    TROUPE_ERR_INVALID_PARAMS = 1,   /* create: a key or value in the parameters is wrong */
    TROUPE_ERR_INVALID_ARGUMENT = 2, /* an op got a call it cannot take (shape, type, null pointer) */
    TROUPE_ERR_UNSUPPORTED = 3,      /* valid, but this plugin does not do it (type, backend) */
    TROUPE_ERR_OUT_OF_MEMORY = 4,
    TROUPE_ERR_INTERNAL = 5 /* anything else; the message says what */
};

/* ---- kinds, backends, log levels --------------------------------------------------------------- */

typedef enum troupe_plugin_kind {
    TROUPE_PLUGIN_KIND_ATTENTION = 1,
    TROUPE_PLUGIN_KIND_QUANT = 2,
    TROUPE_PLUGIN_KIND_SPEC = 3,
    TROUPE_PLUGIN_KIND_KV = 4 /* ABI 2: a KV cache that owns its layout (kv.h) */
} troupe_plugin_kind;

typedef enum troupe_backend { TROUPE_BACKEND_CPU = 0, TROUPE_BACKEND_CUDA = 1 } troupe_backend;

typedef enum troupe_log_level {
    TROUPE_LOG_LEVEL_DEBUG = 0,
    TROUPE_LOG_LEVEL_INFO = 1,
    TROUPE_LOG_LEVEL_WARN = 2,
    TROUPE_LOG_LEVEL_ERROR = 3
} troupe_log_level;

/* ---- host services ----------------------------------------------------------------------------- */

/* A range of work: process items [begin, end). Must not throw or longjmp out. */
typedef void (*troupe_range_fn)(void* fn_ctx, int64_t begin, int64_t end);

/* Runs fn(fn_ctx, begin, end) over disjoint ranges covering [0, n) on the host's workers and returns
 * when all are done (TROUPE_OK), or a failure status when the host could not run them. */
typedef int32_t (*troupe_parallel_for_fn)(void* host_ctx, int64_t n, troupe_range_fn fn, void* fn_ctx);

/* Runs fn(fn_ctx, begin, end) over [0, n) for loops that stream memory (decode's matmuls): thread i of the pool
 * takes share i of [0, n) at every call (one contiguous share per thread, the same at every call, so each thread
 * streams one region front to back), walks it in pieces of `grain` items (the last one shorter), and the end is
 * balanced by taking pieces from the back of other shares. Returns like troupe_parallel_for_fn. */
typedef int32_t (*troupe_parallel_ranges_fn)(void* host_ctx, int64_t n, int64_t grain, troupe_range_fn fn,
                                             void* fn_ctx);

/* The same with the shares given: share s is [bounds[s], bounds[s + 1]) and thread s of the pool takes it at every
 * call (bounds ascend from bounds[0] = 0; n_shares <= the pool's n_threads). What a weight the host placed in one
 * region per thread (troupe_quant_ops.place) streams with: shard s read by thread s, every matrix of a step. */
typedef int32_t (*troupe_parallel_shares_fn)(void* host_ctx, const int64_t* bounds, int32_t n_shares, int64_t grain,
                                             troupe_range_fn fn, void* fn_ctx);

/* Per-call execution context handed to ops: the backend the call runs on and the caller's lane (the executor's
 * worker pool on the CPU, its CUDA stream on a GPU). On TROUPE_BACKEND_CUDA every activation, output and cache
 * pointer of the call is device memory and the op enqueues its work on `stream` (it may return before the work is
 * done); on the CPU they are host memory and the op is done when it returns. */
typedef struct troupe_parallel {
    uint32_t struct_size;
    uint32_t version; /* 4 */
    void* host_ctx;
    troupe_parallel_for_fn parallel_for;       /* null: the plugin runs fn(fn_ctx, 0, n) itself (always null on CUDA) */
    int32_t backend;                           /* version 2: troupe_backend (TROUPE_BACKEND_CPU when absent) */
    void* stream;                              /* version 2: the lane's cudaStream_t on CUDA, else null */
    troupe_parallel_ranges_fn parallel_ranges; /* version 3: null (or absent): use parallel_for */
    troupe_parallel_shares_fn parallel_shares; /* version 4: null (or absent): no shares of the caller's choosing */
    int32_t n_threads;                         /* version 4: threads parallel_ranges / parallel_shares run on (0:
                                                  unknown) */
} troupe_parallel;

#define TROUPE_PARALLEL_VERSION 4u

typedef struct troupe_host_services {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    void* host_ctx;
    /* Writes one line to troupe's log. `source` is the plugin's "kind/name". */
    void (*log)(void* host_ctx, int32_t level, const char* source, const char* message);
    /* The host's general worker pool, for work outside op calls (e.g. quantizing at load). */
    troupe_parallel_for_fn parallel_for;
} troupe_host_services;

#define TROUPE_HOST_SERVICES_VERSION 1u

/* ---- parameters -------------------------------------------------------------------------------- */

typedef struct troupe_param {
    const char* key;   /* dotted, relative to the plugin's params node: "max_draft", "lists.0" */
    const char* value; /* the YAML scalar as written; "" for null */
} troupe_param;

typedef struct troupe_plugin_params {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    const troupe_param* items;
    size_t n_items;
    const char* yaml; /* the params sub-tree as YAML text ("{}" when absent) */
    int32_t backend;  /* troupe_backend the instance will run on */
    /* Version 2: the model the instance is made for, its tensors by name and side files (tensors.h); null when
     * the instance is made without a model. Valid for the instance's lifetime. */
    const troupe_model_services* model;
} troupe_plugin_params;

#define TROUPE_PLUGIN_PARAMS_VERSION 2u

/* An instance made by `create`; opaque to the host. */
typedef struct troupe_plugin_instance troupe_plugin_instance;

/* ---- attention --------------------------------------------------------------------------------- */

/*
 * One attention step for one layer, mirroring troupe::attention_call (core/model/ops.h).
 *
 *   k_pool, v_pool: [n_blocks, block_size, n_kv_heads, head_dim] of kv_type elements: float32 (TROUPE_KV_F32),
 *                   or IEEE half floats stored as uint16_t (TROUPE_KV_F16: cast the pointers)
 *   sequence s, position p  ->  block block_tables[s][p / block_size], row p % block_size
 *
 * kv_type (version 2) is only ever a type the plugin lists in its troupe_attention_ops.kv_types; a plugin
 * whose ops have no kv_types gets float32 pools.
 *
 * The op writes each token's k and v rows into the pools at its position, then computes causal
 * attention: a token at position p of sequence s attends to positions 0..p of s (rows written by
 * earlier calls plus those written by this one). Query head h uses kv head h / (n_heads / n_kv_heads).
 */
typedef struct troupe_attention_call {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    int32_t n_tokens;
    int32_t n_heads;
    int32_t n_kv_heads; /* n_heads % n_kv_heads == 0 */
    int32_t head_dim;
    float scale;
    const float* q;           /* [n_tokens, n_heads, head_dim] */
    const float* k;           /* [n_tokens, n_kv_heads, head_dim] */
    const float* v;           /* [n_tokens, n_kv_heads, head_dim] */
    float* out;               /* [n_tokens, n_heads, head_dim] */
    const int32_t* positions; /* [n_tokens] */
    const int32_t* seq_of;    /* [n_tokens] index into block_tables */
    int32_t n_seqs;
    const int32_t* const* block_tables; /* [n_seqs][blocks of the sequence] */
    int32_t block_size;
    float* k_pool; /* element type: kv_type */
    float* v_pool;
    int32_t kv_type; /* version 2: troupe_kv_type of the pools' elements (TROUPE_KV_F32 when absent) */
    /* Version 3: tree attention, for verifying a tree of draft tokens (spec.h) in one pass. Only set for ops whose
     * troupe_attention_ops.trees is 1; null `rows` means causal by position as above. With `rows`:
     *   token t writes its k and v at cache row rows[t] (not at positions[t], which is only its RoPE position;
     *   RoPE is already applied to q and k), and attends to the rows r of its sequence with
     *   r < mask_base[t], or r = mask_base[t] + 64 * w + j where bit j of mask[t * mask_words + w] is set
     *   (its ancestors in the tree and itself). */
    const int32_t* rows;      /* [n_tokens] */
    const int32_t* mask_base; /* [n_tokens] */
    const uint64_t* mask;     /* [n_tokens, mask_words] */
    int32_t mask_words;
    /* Version 4: what architectures beyond Llama ask of attention. A field the host sets only for ops whose
     * troupe_attention_ops.features has its bit (the host refuses at load a model that needs a feature the op
     * lacks); 0 means "not used". */
    int32_t layer;  /* the layer this call is for (0-based) */
    float softcap;  /* TROUPE_ATTENTION_FEATURE_SOFTCAP: score s -> softcap * tanh(s / softcap), after scaling, before
                       masking and softmax (Gemma 2); 0: none */
    int32_t window; /* TROUPE_ATTENTION_FEATURE_WINDOW: a token at position p attends only to positions > p - window
                       (sliding-window layers of Gemma 2, Mistral, Phi-3); 0: the whole causal past */
    /* TROUPE_ATTENTION_FEATURE_MLA (multi-head latent attention, DeepSeek-V2): with kv_lora_rank > 0 the call is
     * MLA. n_kv_heads is 1 and head_dim is qk_nope_dim + rope_dim:
     *   q:      [n_tokens, n_heads, head_dim]: per head the no-RoPE part, then the RoPE part (RoPE applied)
     *   k:      [n_tokens, kv_lora_rank + rope_dim]: the normalised latent c_kv, then the shared RoPE key (applied)
     *   v:      null; k_pool holds the latent rows [n_blocks, block_size, kv_lora_rank + rope_dim]; v_pool null
     *   out:    [n_tokens, n_heads, v_head_dim]
     * The op expands keys and values from the latent with blk.<layer>.attn_kv_b.weight (per head qk_nope_dim key
     * rows, then v_head_dim value rows), which it reads through the model services (tensors.h). */
    int32_t kv_lora_rank;
    int32_t rope_dim;
    int32_t v_head_dim;
} troupe_attention_call;

#define TROUPE_ATTENTION_CALL_VERSION 4u

/* Bits of troupe_attention_ops.features (version 4). */
#define TROUPE_ATTENTION_FEATURE_SOFTCAP (1u << 0)
#define TROUPE_ATTENTION_FEATURE_WINDOW (1u << 1)
#define TROUPE_ATTENTION_FEATURE_MLA (1u << 2)

/* Element types of the KV pools. */
typedef enum troupe_kv_type {
    TROUPE_KV_F32 = 0,
    TROUPE_KV_F16 = 1,
} troupe_kv_type;

/* Bit of a troupe_kv_type in troupe_attention_ops.kv_types. */
#define TROUPE_KV_TYPE_BIT(t) (1u << (uint32_t)(t))

typedef struct troupe_attention_ops {
    uint32_t struct_size;
    uint32_t version; /* 2 */
    int32_t (*forward)(troupe_plugin_instance* instance, const troupe_attention_call* call,
                       const troupe_parallel* parallel);
    /* Version 2: the KV pool element types forward() takes, as TROUPE_KV_TYPE_BIT()s; 0 or absent (version
     * 1 ops) means float32 only. */
    uint32_t kv_types;
    /* Version 3: 1 when forward() takes tree calls (troupe_attention_call.rows / mask); else the host verifies
     * only chains of drafts with this plugin. */
    int32_t trees;
    /* Version 4: the TROUPE_ATTENTION_FEATURE_* bits forward() honours; 0 or absent: none. */
    uint32_t features;
} troupe_attention_ops;

#define TROUPE_ATTENTION_OPS_VERSION 4u

/* ---- quant ------------------------------------------------------------------------------------- */

/* A weight matrix as stored: n_out rows of n_in elements of ggml type `type` (GGUF numbering). */
typedef struct troupe_weight {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    uint32_t type;
    const void* data; /* stays valid and unchanged while any prepared weight made from it is alive */
    int64_t n_in;
    int64_t n_out;
    size_t row_stride; /* bytes between rows */
} troupe_weight;

#define TROUPE_WEIGHT_VERSION 1u

/* A weight the plugin has taken over (possibly re-quantized); opaque to the host. */
typedef struct troupe_prepared_weight troupe_prepared_weight;

/* Where troupe_quant_ops.place puts a weight's rows: shard s (rows [bounds[s], bounds[s + 1])) at dsts[s], the
 * placed_bytes of those rows, 64-byte aligned, owned by the host. */
typedef struct troupe_placement {
    uint32_t struct_size;
    uint32_t version;      /* 1 */
    int32_t n_shards;      /* the threads of the pool that will run the products */
    const int64_t* bounds; /* [n_shards + 1]: ascending from 0 to n_out, multiples of placement_rows but the last */
    uint8_t* const* dsts;  /* [n_shards] */
} troupe_placement;

#define TROUPE_PLACEMENT_VERSION 1u

typedef struct troupe_quant_ops {
    uint32_t struct_size;
    uint32_t version; /* 2 */
    /* 1 when this instance takes over weights stored as `type`, else 0. */
    int32_t (*claims)(troupe_plugin_instance* instance, uint32_t type);
    int32_t (*prepare)(troupe_plugin_instance* instance, const troupe_weight* weight, troupe_prepared_weight** out);
    /* Bytes read per full product with this weight. */
    size_t (*prepared_bytes)(troupe_plugin_instance* instance, const troupe_prepared_weight* weight);
    /* y[n_tokens, n_out] = x[n_tokens, n_in] * W^T, float32, rows contiguous. */
    int32_t (*matmul)(troupe_plugin_instance* instance, const troupe_prepared_weight* weight, const float* x, float* y,
                      int64_t n_tokens, const troupe_parallel* parallel);
    void (*release)(troupe_plugin_instance* instance, troupe_prepared_weight* weight);
    /* Version 2: placement by the host (CPU). Decode streams every weight once per step, each thread its share of
     * every matrix; it reads fastest when thread s's shares of all the matrices lie back to back in one region, in
     * the order a step multiplies them (kernels.weights: copy). A plugin whose prepared rows can move there fills
     * these three; null (or a version-1 table): the plugin keeps its own memory.
     *   placement_rows: shard bounds must be multiples of this many rows (0: this weight cannot be placed);
     *   placed_bytes:   bytes rows [r0, r1) take placed (r0 a multiple of placement_rows);
     *   place:          copies the prepared rows into the host's shards (troupe_placement), frees the plugin's own
     *                   copy and reads them there from then on, shard s on thread s (troupe_parallel's
     *                   parallel_shares) where the call's pool has n_shards threads; products are bit for bit
     *                   those before. On failure the weight is unchanged. The host frees the shards after the
     *                   last product with the weight, possibly before release (which must not read them). */
    int64_t (*placement_rows)(troupe_plugin_instance* instance, const troupe_prepared_weight* weight);
    size_t (*placed_bytes)(troupe_plugin_instance* instance, const troupe_prepared_weight* weight, int64_t r0,
                           int64_t r1);
    int32_t (*place)(troupe_plugin_instance* instance, troupe_prepared_weight* weight,
                     const troupe_placement* placement);
} troupe_quant_ops;

#define TROUPE_QUANT_OPS_VERSION 2u

/* ---- spec (speculative decoding): troupe_spec_ops in spec.h ------------------------------------ */

/* ---- the descriptor ---------------------------------------------------------------------------- */

typedef struct troupe_plugin_descriptor {
    uint32_t struct_size;
    uint32_t version;           /* 2 */
    uint32_t abi_version;       /* TROUPE_PLUGIN_ABI_VERSION the plugin was built with */
    int32_t kind;               /* troupe_plugin_kind */
    const char* name;           /* "gqa"; the library is libtroupe_<kind>_<name>.so */
    const char* plugin_version; /* the plugin's own version, e.g. "1.0.0" */
    const char* description;    /* one line */

    /* Optional. How well this plugin runs on `backend` (troupe_backend): negative = cannot, 0..100 =
     * can, higher is better. Null: CPU only. */
    int32_t (*score)(int32_t backend);

    /* Makes an instance from parameters; on failure returns a status, leaves *out null, and
     * error_message(NULL) on the same thread says why. */
    int32_t (*create)(const troupe_plugin_params* params, troupe_plugin_instance** out);
    void (*destroy)(troupe_plugin_instance* instance);
    /* The last failure of an op on `instance` (or of create on this thread, for NULL). Valid until the
     * next call on the instance (or to create). Never null: "" when there was none. */
    const char* (*error_message)(const troupe_plugin_instance* instance);

    /* The op table of `kind`; the others are null. */
    const troupe_attention_ops* attention;
    const troupe_quant_ops* quant;
    const troupe_spec_ops* spec;

    /* Version 2 (ABI 2). A KV plugin's table (kind KV). */
    const troupe_kv_ops* kv;
    /* An offline quantization method's table (kind QUANT; a quant plugin fills `quant`, `quantize` or both). */
    const troupe_quantize_ops* quantize;
    /* Any kind: the taps the instance observes (taps.h); null: none. */
    const troupe_tap_ops* taps;
} troupe_plugin_descriptor;

#define TROUPE_PLUGIN_DESCRIPTOR_VERSION 2u

/* Type of the entry point, for the host's dlsym. Returns null when the plugin cannot speak any version
 * in [host_abi_min, host_abi_max] and prefers to say nothing; most plugins return their descriptor and
 * let the host report the mismatch. */
typedef const troupe_plugin_descriptor* (*troupe_plugin_query_fn)(uint32_t host_abi_min, uint32_t host_abi_max,
                                                                  const troupe_host_services* host);

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_PLUGIN_H */
