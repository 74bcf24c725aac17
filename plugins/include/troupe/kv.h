/*
 * troupe plugin SDK: KV-cache plugins, which own the layout of the cache they read (kind TROUPE_PLUGIN_KIND_KV).
 *
 * A KV plugin stores each layer's keys and values in its own format (int8 with scales, KIVI 2-bit, FP8, ...) and
 * computes attention reading that format directly. It declares its layout once; the host sizes everything
 * from that declaration alone:
 *
 *   block_bytes = round_up(block_size * bytes_per_token + bytes_per_block, 64)     per layer
 *   pool        = [n_blocks][block_bytes] per layer (untyped: the block pool hands out block ids, swap, prefix
 *                 sharing and copy-on-write move whole blocks as bytes, so everything about a block lives in it)
 *   window      = [n_window_slots][window_tokens * window_bytes_per_token] per layer, one slot per sequence
 *                 that runs at once (shape.max_seqs): per-sequence state kept outside the blocks, such as KIVI's
 *                 newest tokens in float until their block fills
 *   KV capacity = budget / (n_layers * block_bytes) blocks; tokens = blocks * block_size
 *
 * Chosen in YAML under `kv:` (`kv: {plugin: int8}`, `kv: {plugin: {name: kivi, params: {...}}}`); the library is
 * <plugin_dir>/kv/libtroupe_kv_<name>.so. When a KV plugin is chosen it replaces the attention plugin's cache
 * and kernels for the layers it serves.
 *
 * forward() is troupe_attention_call's contract over the plugin's own blocks: write each token's k and v at its
 * position (block block_tables[s][p / block_size], row p % block_size), then causal attention of each token over
 * positions 0..p of its sequence. Positions before a step's first position were written by earlier calls; a
 * sequence's window slot is the same at every step of the sequence and is reset by the host (zeroed) when the
 * sequence first gets it and when it starts again at position 0. A sequence resumed elsewhere (after its slot was
 * given to another) starts at a block boundary: position 0, or after a prefix of whole cached blocks.
 */
#ifndef TROUPE_KV_H
#define TROUPE_KV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_plugin_instance troupe_plugin_instance;
typedef struct troupe_parallel troupe_parallel;

/* What the host tells the plugin before asking for its layout. */
typedef struct troupe_kv_shape {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    int32_t n_layers;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t block_size; /* tokens per block */
    int32_t max_seqs;   /* sequences that run at once: the number of window slots */
    int32_t backend;    /* troupe_backend */
} troupe_kv_shape;

#define TROUPE_KV_SHAPE_VERSION 1u

/* The plugin's declaration, per layer. */
typedef struct troupe_kv_layout {
    uint32_t struct_size;
    uint32_t version;              /* 1 */
    size_t bytes_per_token;        /* K and V of one token, including per-token scales */
    size_t bytes_per_block;        /* per-block metadata besides the tokens (per-channel scales, zero points) */
    int32_t window_tokens;         /* per-sequence tokens kept outside the blocks; 0: no window */
    size_t window_bytes_per_token; /* bytes per window token */
} troupe_kv_layout;

#define TROUPE_KV_LAYOUT_VERSION 1u

typedef struct troupe_kv_call {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    int32_t layer;
    int32_t n_tokens;
    int32_t n_heads;
    int32_t n_kv_heads; /* n_heads % n_kv_heads == 0; query head h uses kv head h / (n_heads / n_kv_heads) */
    int32_t head_dim;
    float scale;
    const float* q;           /* [n_tokens, n_heads, head_dim], RoPE applied */
    const float* k;           /* [n_tokens, n_kv_heads, head_dim], RoPE applied */
    const float* v;           /* [n_tokens, n_kv_heads, head_dim] */
    float* out;               /* [n_tokens, n_heads, head_dim] */
    const int32_t* positions; /* [n_tokens] */
    const int32_t* seq_of;    /* [n_tokens] index into block_tables */
    int32_t n_seqs;
    const int32_t* const* block_tables; /* [n_seqs][blocks of the sequence] */
    int32_t block_size;
    void* pool;         /* this layer's blocks: [n_blocks][block_bytes] */
    size_t block_bytes; /* the rounded size above */
    void* window;       /* this layer's window slots: [n_window_slots][window_tokens * window_bytes_per_token] */
    const int32_t* window_slot; /* [n_seqs] each sequence's slot; null without a window */
} troupe_kv_call;

#define TROUPE_KV_CALL_VERSION 1u

typedef struct troupe_kv_ops {
    uint32_t struct_size;
    uint32_t version; /* 1 */
    /* Declares the layout for `shape` (called once per model, before any forward). A shape the plugin cannot
     * serve (head_dim, block_size) fails with a message. */
    int32_t (*layout)(troupe_plugin_instance* instance, const troupe_kv_shape* shape, troupe_kv_layout* out);
    int32_t (*forward)(troupe_plugin_instance* instance, const troupe_kv_call* call, const troupe_parallel* parallel);
} troupe_kv_ops;

#define TROUPE_KV_OPS_VERSION 1u

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_KV_H */
