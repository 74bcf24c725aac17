#include "core/quantize/quantize_plan.h"

#include <algorithm>

namespace troupe {

result<ggml_type> parse_quantize_type(std::string_view name, std::optional<int64_t> group) {
    std::string n(name);
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (n == "w4") {
        if (!group) return make_error("--type w4 needs --group 32, 64 or 128 (the weights per scale and zero point)");
        switch (*group) {
            case 32:
                return ggml_type::q4_1;
            case 64:
                return ggml_type::w4_g64;
            case 128:
                return ggml_type::w4_g128;
            default:
                return make_error("--group " + std::to_string(*group) + ": must be 32, 64 or 128");
        }
    }
    const std::pair<const char*, ggml_type> types[] = {{"q4_0", ggml_type::q4_0},     {"q4_1", ggml_type::q4_1},
                                                       {"q4_k", ggml_type::q4_k},     {"q8_0", ggml_type::q8_0},
                                                       {"w4_g64", ggml_type::w4_g64}, {"w4_g128", ggml_type::w4_g128}};
    for (const auto& [type_name, t] : types) {
        if (n != type_name) continue;
        if (group && *group != traits(t).block_size) {
            return make_error("--group " + std::to_string(*group) + " does not fit --type " + std::string(name) +
                              " (its groups are " + std::to_string(traits(t).block_size) + " weights)");
        }
        return t;
    }
    return make_error("--type '" + std::string(name) + "': unknown (valid: " + quantize_type_names + ")");
}

result<ggml_type> parse_output_type(std::string_view name) {
    if (name == "f16" || name == "F16") return ggml_type::f16;
    if (name == "f32" || name == "F32") return ggml_type::f32;
    if (name == "q6_k" || name == "Q6_K") return ggml_type::q6_k;
    auto t = parse_quantize_type(name, std::nullopt);
    if (!t.ok()) {
        return make_error("--output-type '" + std::string(name) +
                          "': unknown (valid: q4_0, q4_1, q4_k, q6_k, q8_0, w4_g64, w4_g128, f16, f32)");
    }
    return t;
}

ggml_type default_output_type(ggml_type target, int64_t n_in) {
    // llama.cpp gives the output matrix more bits than a 4-bit body (it decides every token); Q6_K's blocks of 256
    // fall back to Q8_0 on narrower rows.
    const bool four_bit = target == ggml_type::q4_0 || target == ggml_type::q4_1 || target == ggml_type::q4_k ||
                          target == ggml_type::w4_g64 || target == ggml_type::w4_g128;
    if (!four_bit) return target;  // Q8_0 (and float targets) keep theirs
    return n_in % traits(ggml_type::q6_k).block_size == 0 ? ggml_type::q6_k : ggml_type::q8_0;
}

namespace {

// Output types the host writes itself: floats, and Q6_K, which no method writes (round to nearest at 6 bits).
bool host_writes_output(ggml_type t) {
    return t == ggml_type::f16 || t == ggml_type::f32 || t == ggml_type::q6_k;
}

}  // namespace

const planned_group* quantize_plan::group_of(const std::string& weight) const {
    for (const planned_group& g : groups) {
        if (std::find(g.weights.begin(), g.weights.end(), weight) != g.weights.end()) return &g;
    }
    return nullptr;
}

result<quantize_plan> make_quantize_plan(const llama_hparams& hp, bool tied_output, ggml_type target,
                                         const std::string& method,
                                         const std::function<bool(ggml_type, int64_t)>& can_write,
                                         std::optional<ggml_type> output_type) {
    quantize_plan plan;
    plan.target = target;
    auto add = [&](int32_t layer, tap_point input, int64_t n_in, std::vector<std::string> names,
                   std::vector<int64_t> n_out, fold_kind fold, std::string fold_into) {
        const ggml_type t = layer >= 0 ? target : output_type ? *output_type : default_output_type(target, n_in);
        plan.groups.push_back(planned_group{layer, input, n_in, std::move(names), std::move(n_out), fold,
                                            std::move(fold_into), t, t, true, layer < 0 && !output_type});
    };
    // The architecture's tensors (core/model/arch): fused ones (phi3's attn_qkv, its ffn_up of gate then up rows) are
    // one group each, and input scales fold into rows only where the rows are a tensor of their own and no bias
    // (qwen2's attn_v.bias) would need the same scale.
    const arch_description& d = *hp.arch;
    for (int32_t l = 0; l < hp.n_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        const bool up_rows = !d.fused_gate_up;
        add(l, tap_point::ffn_hidden, hp.ffn_dim, {p + "ffn_down.weight"}, {hp.dim},
            up_rows ? fold_kind::rows : fold_kind::none, up_rows ? p + "ffn_up.weight" : "");
        const bool v_feeds_one_channel = hp.n_heads == hp.n_kv_heads && !d.fused_qkv && !d.qkv_bias;
        add(l, tap_point::attn_out, hp.q_width(), {p + "attn_output.weight"}, {hp.dim},
            v_feeds_one_channel ? fold_kind::rows : fold_kind::none, v_feeds_one_channel ? p + "attn_v.weight" : "");
        if (d.fused_gate_up) {
            add(l, tap_point::ffn_norm, hp.dim, {p + "ffn_up.weight"}, {2 * static_cast<int64_t>(hp.ffn_dim)},
                fold_kind::norm, p + "ffn_norm.weight");
        } else {
            add(l, tap_point::ffn_norm, hp.dim, {p + "ffn_gate.weight", p + "ffn_up.weight"}, {hp.ffn_dim, hp.ffn_dim},
                fold_kind::norm, p + "ffn_norm.weight");
        }
        if (d.fused_qkv) {
            add(l, tap_point::attn_norm, hp.dim, {p + "attn_qkv.weight"},
                {static_cast<int64_t>(hp.q_width()) + 2 * hp.kv_width()}, fold_kind::norm, p + "attn_norm.weight");
        } else {
            add(l, tap_point::attn_norm, hp.dim, {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"},
                {hp.q_width(), hp.kv_width(), hp.kv_width()}, fold_kind::norm, p + "attn_norm.weight");
        }
    }
    if (!tied_output) {
        add(-1, tap_point::output_norm, hp.dim, {"output.weight"}, {hp.n_vocab}, fold_kind::norm, "output_norm.weight");
    }
    const ggml_type_traits tt = traits(target);
    std::vector<std::pair<ggml_type, int64_t>> refused;  // (type, n_in)
    for (planned_group& g : plan.groups) {
        if (g.n_in % traits(g.asked).block_size != 0) {
            g.type = ggml_type::f16;
            g.by_method = false;
            ++plan.n_fallback;
        } else if (g.layer < 0 && g.asked != target && host_writes_output(g.asked)) {
            g.by_method = false;  // the host converts the output matrix
        } else if (!can_write(g.asked, g.n_in)) {
            if (g.layer < 0 && g.default_output) {
                g.by_method = false;  // a default the method cannot write: the host rounds it to nearest
                continue;
            }
            if (std::find(refused.begin(), refused.end(), std::pair{g.asked, g.n_in}) == refused.end()) {
                refused.emplace_back(g.asked, g.n_in);
            }
        }
    }
    if (!refused.empty()) {
        std::sort(refused.begin(), refused.end());
        std::string what;
        for (const auto& [t, n] : refused) {
            what += (what.empty() ? "" : ", ") + std::string(traits(t).name) + " for rows of " + std::to_string(n);
        }
        return make_error("method " + method + " cannot write " + what +
                          " weights (the model's linears need it); choose another --type or --method");
    }
    const bool target_used =
        std::any_of(plan.groups.begin(), plan.groups.end(), [&](const planned_group& g) { return g.type == target; });
    if (!target_used) {
        std::string widths;
        for (const planned_group& g : plan.groups) {
            const std::string w = std::to_string(g.n_in);
            if (widths.find(w) == std::string::npos) widths += (widths.empty() ? "" : ", ") + w;
        }
        return make_error("no linear of the model can be written as " + std::string(tt.name) + ": its rows (" + widths +
                          " weights) are not multiples of " + std::string(tt.name) + "'s blocks of " +
                          std::to_string(tt.block_size) + "; choose a type with smaller blocks (q8_0, q4_0)");
    }
    return plan;
}

std::string describe(const quantize_plan& plan) {
    std::string s;
    for (const planned_group& g : plan.groups) {
        s += g.layer < 0 ? "output:" : "blk." + std::to_string(g.layer) + ":";
        for (size_t i = 0; i < g.weights.size(); ++i) {
            std::string short_name = g.weights[i];
            if (g.layer >= 0) short_name = short_name.substr(short_name.find('.', 4) + 1);
            s += (i == 0 ? " " : ", ") + short_name.substr(0, short_name.rfind(".weight")) + " [" +
                 std::to_string(g.n_out[i]) + " x " + std::to_string(g.n_in) + "]";
        }
        s += " -> " + std::string(traits(g.type).name);
        if (g.layer < 0 && g.default_output) s += " (the default for the output matrix)";
        if (g.layer < 0 && !g.by_method) s += " by the host";
        if (g.type != g.asked) {
            const ggml_type_traits at = traits(g.asked);
            s += " (rows of " + std::to_string(g.n_in) + " are not a whole number of " + std::string(at.name) +
                 "'s blocks of " + std::to_string(at.block_size) + ")";
        }
        s += ", input " + std::string(tap_name(g.input));
        if (g.fold != fold_kind::none && g.by_method) s += ", scales fold into " + g.fold_into;
        s += "\n";
    }
    return s;
}

}  // namespace troupe
