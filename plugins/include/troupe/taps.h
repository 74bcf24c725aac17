/*
 * troupe plugin SDK: taps, the named intermediates of the model graph a plugin can observe.
 *
 * Every layer's forward names its intermediates (like llama.cpp's cb(cur, "attn_norm", il)). A plugin of any
 * kind that fills troupe_plugin_descriptor.taps says which taps it wants; during each forward step the model
 * calls observe() for each of them, layer by layer, on the executor's lane (one thread; never concurrently for
 * one instance). Quantizers calibrate from them (the inputs of each linear), EAGLE and Medusa read hidden
 * states, a KV plugin could collect per-layer key statistics.
 *
 *   per layer l:  x ─ rmsnorm ─► ATTN_NORM ─► q,k,v projections ─► Q, K, V (before RoPE)
 *                 attention ─► ATTN_OUT ─► attn_output ─► x += …
 *                 x ─ rmsnorm ─► FFN_NORM ─► gate, up ─► FFN_HIDDEN = act(gate)·up ─► ffn_down ─► x += …
 *                 LAYER_OUT = x (the hidden state after the layer)
 *   after the last layer, for the rows whose logits are computed:  OUTPUT_NORM ─► output ─► LOGITS
 *
 * Each linear's input is a tap: attn_q/k/v read ATTN_NORM, attn_output ATTN_OUT, ffn_gate/up FFN_NORM,
 * ffn_down FFN_HIDDEN, output OUTPUT_NORM.
 */
#ifndef TROUPE_TAPS_H
#define TROUPE_TAPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum troupe_tap {
    TROUPE_TAP_ATTN_NORM = 0,   /* [n_rows, dim]          input of attn_q / attn_k / attn_v */
    TROUPE_TAP_Q = 1,           /* [n_rows, n_heads * head_dim]     after bias, before RoPE */
    TROUPE_TAP_K = 2,           /* [n_rows, n_kv_heads * head_dim]  after bias, before RoPE */
    TROUPE_TAP_V = 3,           /* [n_rows, n_kv_heads * head_dim] */
    TROUPE_TAP_ATTN_OUT = 4,    /* [n_rows, n_heads * head_dim]     input of attn_output */
    TROUPE_TAP_FFN_NORM = 5,    /* [n_rows, dim]          input of ffn_gate / ffn_up */
    TROUPE_TAP_FFN_HIDDEN = 6,  /* [n_rows, ffn_dim]      input of ffn_down */
    TROUPE_TAP_LAYER_OUT = 7,   /* [n_rows, dim]          the residual stream after the layer */
    TROUPE_TAP_OUTPUT_NORM = 8, /* [n_logit_rows, dim]    input of the output matrix (layer -1) */
    TROUPE_TAP_LOGITS = 9,      /* [n_logit_rows, n_vocab] (layer -1) */
    TROUPE_TAP_COUNT = 10
} troupe_tap;

#define TROUPE_TAP_BIT(t) (1ull << (uint32_t)(t))

/* The tap's name as troupe logs it ("attn_norm"); null for an unknown id. */
static inline const char* troupe_tap_name(int32_t tap) {
    static const char* const names[TROUPE_TAP_COUNT] = {
        "attn_norm", "q", "k", "v", "attn_out", "ffn_norm", "ffn_hidden", "layer_out", "output_norm", "logits"};
    return tap >= 0 && tap < TROUPE_TAP_COUNT ? names[tap] : 0;
}

/* One observation: the tap's rows for this step, one per token (or per logits row for OUTPUT_NORM / LOGITS). */
typedef struct troupe_tap_data {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    int32_t tap;      /* troupe_tap */
    int32_t layer;    /* 0-based; -1 for OUTPUT_NORM and LOGITS */
    int64_t n_rows;
    int64_t width;
    const float* data;        /* [n_rows, width] float32, rows contiguous; valid only during the call. Host
                                 memory, or device memory on CUDA where troupe_tap_ops.device_data asks for it
                                 (then backend is CUDA and `stream` is the lane's) */
    const int64_t* seq_ids;   /* [n_rows] host memory: the sequence of each row */
    const int32_t* positions; /* [n_rows] host memory: the position of each row in its sequence */
    int32_t backend;          /* troupe_backend */
    void* stream;             /* cudaStream_t on CUDA, else null */
    /* Version 2: [n_rows] host memory: in a step that verifies drafts (spec.h), the proposal node each row is; -1
     * for the sequence's own tokens. Tree nodes' `positions` are their RoPE positions (context length + depth), so
     * siblings share one. */
    const int32_t* nodes;
} troupe_tap_data;

#define TROUPE_TAP_DATA_VERSION 2u

typedef struct troupe_plugin_instance troupe_plugin_instance;

typedef struct troupe_tap_ops {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    /* The taps this instance observes, as TROUPE_TAP_BIT()s; asked once, after create. */
    uint64_t (*wanted)(troupe_plugin_instance* instance);
    /* One tap of one layer in a forward step. A status other than TROUPE_OK fails the step with
     * error_message(instance). */
    int32_t (*observe)(troupe_plugin_instance* instance, const troupe_tap_data* data);
    /* Version 2: where the rows are when the model runs on CUDA. 0 (or a version-1 table): host memory, copied from
     * the device on the lane's stream and waited for before observe() (backend CPU, stream null in the data): the
     * plugin needs no CUDA at all, at the cost of one copy and one wait per tap and layer. 1: device memory
     * (backend CUDA, `stream` the executor lane's cudaStream_t, on which the rows are ready): work on them goes
     * on that stream, and observe() may return before it is done; the rows stay valid only until the next op on
     * the stream overwrites them, so copy what you keep (cudaMemcpyAsync on `stream`). On the CPU backend the
     * rows are always host memory. */
    int32_t device_data;
} troupe_tap_ops;

#define TROUPE_TAP_OPS_VERSION 2u

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_TAPS_H */
