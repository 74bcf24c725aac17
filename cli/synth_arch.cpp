// synth_arch: the keys and tensors of each architecture `troupe synth --arch` writes (see synth_arch.h).
#include "cli/synth_arch.h"

#include "cli/synth_model.h"

namespace troupe::cli {
namespace {

constexpr std::pair<synth_arch, std::string_view> arch_names[] = {
    {synth_arch::llama, "llama"},   {synth_arch::qwen2, "qwen2"},     {synth_arch::phi3, "phi3"},
    {synth_arch::gemma2, "gemma2"}, {synth_arch::mixtral, "mixtral"}, {synth_arch::deepseek2, "deepseek2"},
};

using kind = synth_tensor::kind;

// The MLA dimensions of a deepseek2 model at shape s (synth_arch.h).
struct mla_dims {
    int64_t nope, rope, v, kv_lora, q_lora;
};

mla_dims mla_of(const synth_shape& s) {
    const int64_t h = s.dim / s.n_heads;
    return {h, h / 2, h, 4 * h, s.dim / 2};
}

}  // namespace

std::optional<synth_arch> parse_synth_arch(std::string_view name) {
    for (const auto& [a, n] : arch_names) {
        if (n == name) return a;
    }
    return std::nullopt;
}

std::string_view synth_arch_name(synth_arch a) {
    for (const auto& [x, n] : arch_names) {
        if (x == a) return n;
    }
    return "?";
}

std::string synth_arch_list() {
    std::string s;
    for (const auto& [a, n] : arch_names) s += std::string(s.empty() ? "" : ", ") + std::string(n);
    return s;
}

bool synth_arch_has_experts(synth_arch a) {
    return a == synth_arch::mixtral || a == synth_arch::deepseek2;
}

std::vector<synth_tensor> plan_synth_arch(synth_arch a, const synth_shape& s, int64_t n_vocab, gguf::gguf_writer& w) {
    const std::string arch = a == synth_arch::mixtral ? "llama" : std::string(synth_arch_name(a));
    const std::string k = arch + ".";
    const int64_t dim = s.dim, head_dim = s.dim / s.n_heads;
    const int64_t n_heads = s.n_heads, n_kv_heads = a == synth_arch::deepseek2 ? s.n_heads : s.n_kv_heads;
    const int64_t kv_dim = n_kv_heads * head_dim;
    const int64_t ffn = a == synth_arch::mixtral ? s.moe.expert_ffn : s.ffn;
    const int64_t n_exp = s.moe.n_experts, exp_ffn = s.moe.expert_ffn;
    const mla_dims mla = mla_of(s);

    w.set_string("general.architecture", arch);
    w.set_u32(k + "context_length", static_cast<uint32_t>(s.n_ctx));
    w.set_u32(k + "embedding_length", static_cast<uint32_t>(dim));
    w.set_u32(k + "block_count", static_cast<uint32_t>(s.n_layers));
    w.set_u32(k + "feed_forward_length", static_cast<uint32_t>(ffn));
    w.set_u32(k + "attention.head_count", static_cast<uint32_t>(n_heads));
    w.set_u32(k + "attention.head_count_kv", static_cast<uint32_t>(n_kv_heads));
    w.set_u32(k + "rope.dimension_count", static_cast<uint32_t>(a == synth_arch::deepseek2 ? mla.rope : head_dim));
    const bool eps_1e6 = a == synth_arch::qwen2 || a == synth_arch::gemma2 || a == synth_arch::deepseek2;
    w.set_f32(k + "attention.layer_norm_rms_epsilon", eps_1e6 ? 1e-6f : 1e-5f);
    const bool base_1e6 = a == synth_arch::qwen2 || a == synth_arch::mixtral;
    w.set_f32(k + "rope.freq_base", base_1e6 ? 1000000.0f : 10000.0f);
    w.set_u32(k + "vocab_size", static_cast<uint32_t>(n_vocab));
    switch (a) {
        case synth_arch::llama:
        case synth_arch::qwen2:
            break;
        case synth_arch::phi3:
            w.set_u32(k + "attention.sliding_window", static_cast<uint32_t>(s.n_ctx));
            break;
        case synth_arch::gemma2:
            w.set_u32(k + "attention.key_length", static_cast<uint32_t>(head_dim));
            w.set_u32(k + "attention.value_length", static_cast<uint32_t>(head_dim));
            w.set_f32(k + "attn_logit_softcapping", 50.0f);
            w.set_f32(k + "final_logit_softcapping", 30.0f);
            w.set_u32(k + "attention.sliding_window", 4096);
            break;
        case synth_arch::mixtral:
            w.set_u32(k + "expert_count", static_cast<uint32_t>(n_exp));
            w.set_u32(k + "expert_used_count", static_cast<uint32_t>(s.moe.n_used));
            break;
        case synth_arch::deepseek2:
            w.set_u32(k + "leading_dense_block_count", 1);
            w.set_u32(k + "attention.q_lora_rank", static_cast<uint32_t>(mla.q_lora));
            w.set_u32(k + "attention.kv_lora_rank", static_cast<uint32_t>(mla.kv_lora));
            w.set_u32(k + "attention.key_length", static_cast<uint32_t>(mla.nope + mla.rope));
            w.set_u32(k + "attention.value_length", static_cast<uint32_t>(mla.v));
            w.set_u32(k + "expert_feed_forward_length", static_cast<uint32_t>(exp_ffn));
            w.set_u32(k + "expert_count", static_cast<uint32_t>(n_exp));
            w.set_u32(k + "expert_used_count", static_cast<uint32_t>(s.moe.n_used));
            w.set_u32(k + "expert_shared_count", 1);
            w.set_f32(k + "expert_weights_scale", 1.0f);
            w.set_bool(k + "expert_weights_norm", false);
            w.set_u32(k + "expert_gating_func", 1);
            break;
    }

    const bool tied = a == synth_arch::qwen2 || a == synth_arch::gemma2;
    std::vector<synth_tensor> plan;
    plan.push_back({"token_embd.weight", {dim, n_vocab}, kind::matrix});
    for (int32_t l = 0; l < s.n_layers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        auto add = [&](const std::string& name, std::vector<int64_t> dims, kind what) {
            plan.push_back({b + name, std::move(dims), what});
        };
        add("attn_norm.weight", {dim}, kind::norm);
        if (a == synth_arch::deepseek2) {
            add("attn_q_a.weight", {dim, mla.q_lora}, kind::matrix);
            add("attn_q_a_norm.weight", {mla.q_lora}, kind::norm);
            add("attn_q_b.weight", {mla.q_lora, n_heads * (mla.nope + mla.rope)}, kind::matrix);
            add("attn_kv_a_mqa.weight", {dim, mla.kv_lora + mla.rope}, kind::matrix);
            add("attn_kv_a_norm.weight", {mla.kv_lora}, kind::norm);
            add("attn_kv_b.weight", {mla.kv_lora, n_heads * (mla.nope + mla.v)}, kind::matrix);
            add("attn_output.weight", {n_heads * mla.v, dim}, kind::matrix);
        } else if (a == synth_arch::phi3) {
            add("attn_qkv.weight", {dim, dim + 2 * kv_dim}, kind::matrix);
            add("attn_output.weight", {dim, dim}, kind::matrix);
        } else {
            add("attn_q.weight", {dim, dim}, kind::matrix);
            add("attn_k.weight", {dim, kv_dim}, kind::matrix);
            add("attn_v.weight", {dim, kv_dim}, kind::matrix);
            if (a == synth_arch::qwen2) {
                add("attn_q.bias", {dim}, kind::bias);
                add("attn_k.bias", {kv_dim}, kind::bias);
                add("attn_v.bias", {kv_dim}, kind::bias);
            }
            add("attn_output.weight", {dim, dim}, kind::matrix);
        }
        if (a == synth_arch::gemma2) add("post_attention_norm.weight", {dim}, kind::norm);
        add("ffn_norm.weight", {dim}, kind::norm);
        const bool experts = a == synth_arch::mixtral || (a == synth_arch::deepseek2 && l >= 1);
        if (experts) {
            add("ffn_gate_inp.weight", {dim, n_exp}, kind::router);
            add("ffn_gate_exps.weight", {dim, exp_ffn, n_exp}, kind::matrix);
            add("ffn_up_exps.weight", {dim, exp_ffn, n_exp}, kind::matrix);
            add("ffn_down_exps.weight", {exp_ffn, dim, n_exp}, kind::matrix);
            if (a == synth_arch::deepseek2) {
                add("ffn_gate_shexp.weight", {dim, exp_ffn}, kind::matrix);
                add("ffn_up_shexp.weight", {dim, exp_ffn}, kind::matrix);
                add("ffn_down_shexp.weight", {exp_ffn, dim}, kind::matrix);
            }
        } else if (a == synth_arch::phi3) {
            add("ffn_up.weight", {dim, 2 * ffn}, kind::matrix);
            add("ffn_down.weight", {ffn, dim}, kind::matrix);
        } else {
            add("ffn_gate.weight", {dim, ffn}, kind::matrix);
            add("ffn_up.weight", {dim, ffn}, kind::matrix);
            add("ffn_down.weight", {ffn, dim}, kind::matrix);
        }
        if (a == synth_arch::gemma2) add("post_ffw_norm.weight", {dim}, kind::norm);
    }
    plan.push_back({"output_norm.weight", {dim}, kind::norm});
    if (!tied) plan.push_back({"output.weight", {dim, n_vocab}, kind::matrix});
    return plan;
}

}  // namespace troupe::cli
