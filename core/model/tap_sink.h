// tap_sink: what observes the model graph's taps, the named intermediates of each layer (DESIGN.md "The model
// graph"; the plugin SDK's troupe/taps.h lists the same taps with the same ids).
//
//   per layer l:  x ─ rmsnorm ─► attn_norm ─► q, k, v (before RoPE) ─► attention ─► attn_out ─► x += ·Woᵀ
//                 x ─ rmsnorm ─► ffn_norm ─► ffn_hidden = silu(gate)·up ─► x += ·W_downᵀ ─► layer_out = x
//   after the last layer, for the rows whose logits are computed:  output_norm ─► logits     (layer -1)
//
// The graph asks wanted() once when the sink is attached and calls observe() only for those taps, layer by layer,
// in the order above, on the calling thread of forward(). A tap's rows are the step's tokens in batch order (for
// output_norm and logits: the rows whose logits the step computes), each with its sequence id and position. The
// data is valid only during the call. A failed observe() fails the step with its message.
#pragma once

#include <cstdint>

#include "core/result.h"

namespace troupe {

enum class tap_point : int32_t {
    attn_norm = 0,    // [n_rows, dim]                 input of attn_q / attn_k / attn_v
    q = 1,            // [n_rows, n_heads * head_dim]  before RoPE
    k = 2,            // [n_rows, n_kv_heads * head_dim] before RoPE
    v = 3,            // [n_rows, n_kv_heads * head_dim]
    attn_out = 4,     // [n_rows, n_heads * head_dim]  input of attn_output
    ffn_norm = 5,     // [n_rows, dim]                 input of ffn_gate / ffn_up
    ffn_hidden = 6,   // [n_rows, ffn_dim]             input of ffn_down
    layer_out = 7,    // [n_rows, dim]                 the residual stream after the layer
    output_norm = 8,  // [n_logit_rows, dim]           input of the output matrix (layer -1)
    logits = 9,       // [n_logit_rows, n_vocab]       (layer -1)
};
inline constexpr int32_t n_tap_points = 10;

constexpr uint64_t tap_bit(tap_point t) {
    return uint64_t{1} << static_cast<uint32_t>(t);
}
inline constexpr uint64_t all_taps = (uint64_t{1} << n_tap_points) - 1;

// "attn_norm", ... as the SDK names them.
const char* tap_name(tap_point t);

struct tap_data {
    tap_point tap;
    int32_t layer;  // 0-based; -1 for output_norm and logits
    int64_t n_rows;
    int64_t width;
    const float* data;         // [n_rows, width], rows contiguous
    const int64_t* seq_ids;    // [n_rows] the sequence of each row
    const int32_t* positions;  // [n_rows] the position of each row in its sequence
    // [n_rows] the draft node each row is in a verification step (sequence_step::n_draft), -1 for the sequence's
    // own tokens; null when the step has no drafts.
    const int32_t* nodes = nullptr;
    // Set on a GPU when `data` is device memory (a sink with device_data()): the lane's cudaStream_t, on which the
    // rows are ready. Null: host memory.
    void* stream = nullptr;
};

class tap_sink {
public:
    virtual ~tap_sink() = default;
    // The taps observed, as tap_bit()s; asked once, when the sink is attached.
    virtual uint64_t wanted() const = 0;
    virtual status observe(const tap_data& data) = 0;
    // On a GPU: true to observe the rows in device memory (tap_data::stream set), false for host copies (made on the
    // lane's stream and waited for before observe()). The CPU graph always gives host memory.
    virtual bool device_data() const { return false; }
};

}  // namespace troupe
