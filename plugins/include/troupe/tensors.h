/*
 * troupe plugin SDK: tensors by name, from the loaded model or from a side GGUF file a plugin names.
 *
 * `create` receives troupe_model_services (troupe_plugin_params.model, ABI 2) when the instance is made for a
 * model. A plugin reads the model's tensors and metadata through it (a Medusa head reads output.weight, a
 * quantizer the weights it calibrates), and opens side files named in its params (trained heads, a drafter's
 * extra tensors): `model->open_file(host_ctx, path, &file)`, then `tensor(host_ctx, file, name, &t)`.
 *
 * Memory: tensor data is host memory owned by the host, read-only, valid while the model lives (for the model's
 * tensors: as long as the instance) or until close_file (a side file's). Names are GGUF's ("blk.0.attn_q.weight").
 * Shapes in ggml order: ne[0] is the length of a row (innermost), ne[1] the number of rows, ...
 *
 * The model file's metadata also answers the key `troupe.fingerprint` (a string, computed by the host): the id of
 * the target a side file was made for (vocabulary and graph shape), which trained heads record and compare.
 *
 * Failures return a status; last_error(host_ctx) then says what and where on the calling thread
 * ("medusa.gguf: no tensor 'medusa.0.weight'", "heads.gguf: not a GGUF file (bad magic)").
 */
#ifndef TROUPE_TENSORS_H
#define TROUPE_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_tensor {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    const char* name;
    uint32_t type; /* troupe_type (types.h) */
    int32_t n_dims;
    int64_t ne[4];    /* ggml order; unused dimensions are 1 */
    const void* data; /* troupe_row_bytes(type, ne[0]) * ne[1] * ne[2] * ne[3] bytes */
    size_t n_bytes;
} troupe_tensor;

#define TROUPE_TENSOR_VERSION 1u

/* A second model the host runs for a plugin (version 2 services). */
typedef struct troupe_model troupe_model;

typedef struct troupe_model_info {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    int32_t n_vocab;
    int32_t n_ctx;
    int32_t n_layers;
    int32_t dim;
    int64_t kv_bytes_per_token;    /* counted in the KV budget beside the target's */
    double weight_bytes_per_token; /* bytes of weights one decode step reads (for cost estimates) */
} troupe_model_info;

#define TROUPE_MODEL_INFO_VERSION 1u

/* One sequence's new tokens for model_forward. */
typedef struct troupe_model_step {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    int64_t seq_id;
    const int32_t* tokens; /* [n_tokens] */
    int32_t n_tokens;
    int32_t pos0;               /* position of tokens[0]; rows [0, pos0) are in this model's cache */
    const int32_t* block_table; /* the target sequence's blocks, covering [0, pos0 + n_tokens) */
    int32_t n_blocks;
    int32_t all_logits; /* 1: a logits row per token, else the last token's only */
} troupe_model_step;

#define TROUPE_MODEL_STEP_VERSION 1u

/* A set of tensors: the loaded model, or an open side file. */
typedef struct troupe_tensor_file troupe_tensor_file;

typedef struct troupe_model_services {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    void* host_ctx;
    /* The loaded model's tensors (a GGUF file). */
    const troupe_tensor_file* model;
    /* Tensor `name` of `file`; TROUPE_ERR_INVALID_ARGUMENT when there is none. */
    int32_t (*tensor)(void* host_ctx, const troupe_tensor_file* file, const char* name, troupe_tensor* out);
    int64_t (*n_tensors)(void* host_ctx, const troupe_tensor_file* file);
    int32_t (*tensor_at)(void* host_ctx, const troupe_tensor_file* file, int64_t i, troupe_tensor* out);
    /* Metadata of `file` by GGUF key: integers (any integer or bool type), floats, strings (valid like the
     * tensors). TROUPE_ERR_INVALID_ARGUMENT when absent or of another kind. */
    int32_t (*metadata_int)(void* host_ctx, const troupe_tensor_file* file, const char* key, int64_t* out);
    int32_t (*metadata_float)(void* host_ctx, const troupe_tensor_file* file, const char* key, double* out);
    int32_t (*metadata_string)(void* host_ctx, const troupe_tensor_file* file, const char* key, const char** out);
    /* Opens a side GGUF file (its header and tensor table are checked); close it with close_file. */
    int32_t (*open_file)(void* host_ctx, const char* path, troupe_tensor_file** out);
    void (*close_file)(void* host_ctx, troupe_tensor_file* file);
    /* The calling thread's last failure of these functions; "" when none. */
    const char* (*last_error)(void* host_ctx);

    /* Version 2: a second model run by the host (a draft model for speculative decoding, spec.h).
     * load_model loads a GGUF through troupe's own loader with the target's quant plugins, and refuses one whose
     * vocabulary differs from the target's. Its KV cache lives in pools parallel to the target's: the same block
     * ids, the same block size, the blocks of the target's sequence (troupe_spec_request.block_table), and its
     * bytes per token are counted in the same KV memory budget. Call it from create; model_forward only from the
     * ops the executor calls (propose_batch, accepted), on the executor's lane. */
    int32_t (*load_model)(void* host_ctx, const char* path, troupe_model** out);
    int32_t (*model_info)(void* host_ctx, const troupe_model* model, troupe_model_info* out);
    /* Runs n_steps sequences' new tokens (like the target's forward) and writes logits: per step one row (the
     * last token's) or, with all_logits, one per token, rows in step order. */
    int32_t (*model_forward)(void* host_ctx, troupe_model* model, const troupe_model_step* steps, int32_t n_steps,
                             float* logits);
    void (*unload_model)(void* host_ctx, troupe_model* model);
} troupe_model_services;

#define TROUPE_MODEL_SERVICES_VERSION 2u

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_TENSORS_H */
