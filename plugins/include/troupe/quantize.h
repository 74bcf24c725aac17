/*
 * troupe plugin SDK: offline quantization methods (`troupe quantize --method NAME`), quant-kind plugins that fill
 * troupe_plugin_descriptor.quantize (and, to calibrate, .taps).
 *
 *   host (troupe quantize)                                plugin (e.g. quant/gptq)
 *   load the model as float32, create(params)  ─────────► validates params (group size, damping, ...)
 *   taps->wanted()                             ─────────► e.g. ATTN_NORM | ATTN_OUT | FFN_NORM | FFN_HIDDEN
 *   calibration: forward steps over the text,
 *     taps->observe(data) per layer and tap    ─────────► accumulates statistics (H = 2 X Xᵀ, |x| means, samples)
 *   per layer, per group of linears sharing
 *   one input tap: quantize_group(group)       ─────────► writes each weight's quantized rows (and input scales)
 *   folds input scales, writes the GGUF
 *
 * Input scales (AWQ): when `input_scales` is not null the plugin may scale the group's input channels: it
 * quantizes W·diag(s) instead of W and writes s (1 where unchanged); the host divides what produces the input by s
 * (the preceding norm's weight, or the rows of the preceding linear), so the model's function is unchanged and
 * the file stays a standard model. The host passes null where nothing precedes the input that could absorb s.
 *
 * Every group is quantized exactly once; a failure (a type the method cannot make, a tensor it cannot
 * quantize) returns a status with error_message(instance), and the host writes nothing.
 */
#ifndef TROUPE_QUANTIZE_H
#define TROUPE_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_plugin_instance troupe_plugin_instance;
typedef struct troupe_parallel troupe_parallel;

typedef struct troupe_quantize_weight {
    uint32_t struct_size;
    uint32_t version;  /* 1 */
    const char* name;  /* "blk.3.attn_q.weight" */
    const float* data; /* [n_out, n_in] float32: the weight as the model computes with it */
    int64_t n_out;
    uint32_t type; /* the troupe_type to write */
    void* out;     /* [n_out] rows of troupe_row_bytes(type, n_in) bytes, written by the plugin */
} troupe_quantize_weight;

#define TROUPE_QUANTIZE_WEIGHT_VERSION 1u

typedef struct troupe_quantize_group {
    uint32_t struct_size;
    uint32_t version;  /* 1 */
    int32_t layer;     /* -1 for the output matrix */
    int32_t input_tap; /* troupe_tap whose rows are these weights' input (calibration statistics are keyed by it) */
    int64_t n_in;
    int32_t n_weights;
    const troupe_quantize_weight* weights; /* [n_weights] */
    float* input_scales;                   /* [n_in] or null; see above */
} troupe_quantize_group;

#define TROUPE_QUANTIZE_GROUP_VERSION 1u

typedef struct troupe_quantize_ops {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    /* Whether this method can write `type` for rows of n_in weights (1 yes, 0 no): asked for every tensor before
     * any work, so a type the model's shapes cannot take is refused up front. */
    int32_t (*can_write)(troupe_plugin_instance* instance, uint32_t type, int64_t n_in);
    int32_t (*quantize_group)(troupe_plugin_instance* instance, const troupe_quantize_group* group,
                              const troupe_parallel* parallel);
} troupe_quantize_ops;

#define TROUPE_QUANTIZE_OPS_VERSION 1u

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_QUANTIZE_H */
