// quantize_plan: what `troupe quantize` will do to each tensor of a Llama-family model, decided before any work.
//
// The linears are quantized in groups that share one input (one tap), in an order that lets each group's AWQ input
// scales be folded into what produces its input before that is quantized itself:
//
//   per layer l:  {ffn_down}            input ffn_hidden   fold into the rows of ffn_up
//                 {attn_output}         input attn_out     fold into the rows of attn_v (only when n_heads ==
//                                                          n_kv_heads: otherwise a v row feeds several channels)
//                 {ffn_gate, ffn_up}    input ffn_norm     fold into ffn_norm.weight
//                 {attn_q, attn_k, attn_v} input attn_norm fold into attn_norm.weight
//   then          {output}              input output_norm  fold into output_norm.weight (no group when the output
//                                                          is tied to token_embd, which keeps its type)
//
// A group whose rows are not a whole number of the type's blocks is written as F16 by the host (llama.cpp falls
// back the same way); when no group can take the type, or the method cannot write it, the plan is an error.
// The output matrix takes --output-type, or by default llama.cpp's rule (llama-quant.cpp): for a 4-bit target, Q6_K
// where its rows are whole blocks of 256, else Q8_0; for Q8_0, Q8_0. Q6_K and float output types are written by
// the host (round to nearest: kernels/ref), every other type by the method (the default too where the method
// cannot write it).
// token_embd and every other tensor keep their type; norms stay F32.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/llama_hparams.h"
#include "core/model/tap_sink.h"
#include "core/result.h"
#include "kernels/ggml_types.h"

namespace troupe {

// The types `troupe quantize --type` takes: q4_0, q4_1, q4_k, q8_0, w4_g64, w4_g128, and w4 with a group of 32, 64
// or 128 (q4_1, w4_g64, w4_g128).
result<ggml_type> parse_quantize_type(std::string_view name, std::optional<int64_t> group);
// --output-type: the same names and q6_k, f16, f32 (no --group).
result<ggml_type> parse_output_type(std::string_view name);
// The output matrix's type when --output-type is not given (llama.cpp's default): the target for Q8_0; otherwise
// Q6_K where rows of n_in are whole blocks of 256, else Q8_0 (other targets: the target).
ggml_type default_output_type(ggml_type target, int64_t n_in);
inline constexpr const char* quantize_type_names =
    "q4_0, q4_1, q4_k, q8_0, w4_g64, w4_g128, w4 (with --group 32|64|128)";

enum class fold_kind {
    none,  // nothing before the input can absorb scales
    norm,  // divide the norm weight by s
    rows,  // divide the rows of the preceding linear by s
};

struct planned_group {
    int32_t layer;  // -1: the output matrix
    tap_point input;
    int64_t n_in;
    std::vector<std::string> weights;  // tensor names
    std::vector<int64_t> n_out;        // rows of each
    fold_kind fold = fold_kind::none;
    std::string fold_into;        // the norm or linear that absorbs input scales
    ggml_type asked;              // the type asked for (--type, or --output-type for the output matrix)
    ggml_type type;               // what the group is written as: asked, or F16
    bool by_method = true;        // false: converted by the host (F16 fallback where rows are not whole blocks, or an
                                  // output matrix in Q6_K, F16 or F32)
    bool default_output = false;  // the output matrix's type is default_output_type's, not --output-type's
};

struct quantize_plan {
    ggml_type target;
    std::vector<planned_group> groups;  // in quantization order
    int32_t n_fallback = 0;             // groups written as F16 for want of whole blocks
    const planned_group* group_of(const std::string& weight) const;
};

// can_write: whether the method writes `type` for rows of n_in weights. output_type: the output matrix's type
// (llama.cpp's --output-tensor-type), else default_output_type(target, dim).
result<quantize_plan> make_quantize_plan(const llama_hparams& hp, bool tied_output, ggml_type target,
                                         const std::string& method,
                                         const std::function<bool(ggml_type, int64_t)>& can_write,
                                         std::optional<ggml_type> output_type = {});

// One line per group: "blk.0: ffn_down [172 -> 64] F16 (rows of 172 are not a whole number of Q4_0's blocks of
// 32), ..."
std::string describe(const quantize_plan& plan);

}  // namespace troupe
