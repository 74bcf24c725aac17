// quantize_method: an offline quantization method as `troupe quantize` drives it (the C++ face of a quant plugin's
// troupe_quantize_ops and troupe_tap_ops, plugins/include/troupe/quantize.h; tests implement it directly).
//
//   wanted() / observe()   the taps it calibrates from (tap_sink), during the calibration windows
//   can_write(type, n_in)  asked for every group before any work
//   quantize_group(group)  once per group of linears sharing an input: writes each weight's rows in its type, and
//                          where input_scales is not null may scale the input channels (AWQ): it quantizes
//                          W·diag(s) and writes s; the host divides what produces the input by s.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/ops.h"
#include "core/model/tap_sink.h"
#include "core/result.h"
#include "kernels/ggml_types.h"

namespace troupe {

struct quantize_weight {
    std::string name;   // "blk.3.attn_q.weight"
    const float* data;  // [n_out, n_in] the weight as the model computes with it
    int64_t n_out;
    ggml_type type;  // what to write
    uint8_t* out;    // [n_out] rows of row_bytes(type, n_in) bytes
};

struct linear_group {
    int32_t layer;        // -1 for the output matrix
    tap_point input_tap;  // whose rows are these weights' input
    int64_t n_in;
    std::vector<quantize_weight> weights;
    float* input_scales;  // [n_in] or null (nothing before the input can absorb scales)
};

class quantize_method : public tap_sink {
public:
    virtual std::string name() const = 0;
    virtual bool can_write(ggml_type type, int64_t n_in) = 0;
    virtual status quantize_group(const linear_group& group, const parallel_for_fn& parallel_for) = 0;
};

}  // namespace troupe
