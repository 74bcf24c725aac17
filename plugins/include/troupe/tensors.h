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
} troupe_model_services;

#define TROUPE_MODEL_SERVICES_VERSION 1u

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_TENSORS_H */
