#include "core/model/cpu_llama.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/model/cpu_ops.h"

namespace troupe {

void cpu_llama::scratch::reserve(size_t n_tokens, const llama_hparams& hp) {
    if (positions.size() >= n_tokens) return;
    const size_t t = n_tokens;
    x.resize(t * hp.dim);
    h.resize(t * std::max(hp.dim, hp.q_width()));
    q.resize(t * hp.q_width());
    k.resize(t * hp.kv_width());
    v.resize(t * hp.kv_width());
    attn.resize(t * std::max(hp.q_width(), hp.mla ? hp.mla->out_width() : 0));
    gate.resize(t * hp.ffn_dim);
    up.resize(t * hp.ffn_dim);
    positions.resize(t);
    seq_ids.resize(t);
    rope_cs.resize(t * hp.rope_dims);
    seq_of.resize(t);
    nodes.resize(t);
    kv_rows.resize(t);
    mask_base.resize(t);
    rows.resize(t * hp.dim);
    rows_scratch.resize(t * hp.dim);
    const size_t fused = std::min(t, k_max_fused_tokens);
    qkv.resize(fused * (hp.q_width() + 2 * hp.kv_width()));
    gate_up.resize(fused * 2 * hp.ffn_dim);
}

result<std::unique_ptr<cpu_llama>> cpu_llama::create(llama_weights weights, cpu_llama_params params) {
    if (!params.attention) return make_error("cpu_llama: no attention op configured");
    std::unique_ptr<cpu_llama> m(new cpu_llama());
    m->w_ = std::move(weights);
    m->params_ = params;
    const llama_hparams& hp = m->w_.hp;

    int32_t n_threads = params.n_threads > 0 ? params.n_threads
                                             : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    m->pool_ = params.pool ? params.pool : std::make_shared<cpu::thread_pool>(n_threads);
    m->ctx_ = compute_context::over(*m->pool_);

    m->kv_ = params.kv;
    if (m->kv_.block_size <= 0) m->kv_.block_size = hp.n_ctx;
    if (m->kv_.n_blocks <= 0) {
        const int32_t blocks_per_seq = (hp.n_ctx + m->kv_.block_size - 1) / m->kv_.block_size;
        m->kv_.n_blocks = blocks_per_seq * std::max(1, params.max_seqs);
    }

    quant_op* quant = params.quant.get();
    const std::string& path = m->w_.file->path();
    auto make = [&](const weight_view& w, const std::string& name, linear& out) -> status {
        auto l = linear::make(w, quant, path + ": " + name, params.activations);
        if (!l.ok()) return l.err();
        out = std::move(*l);
        return {};
    };
    // Soft-capping and sliding windows are the attention op's to do: refuse at load what it cannot.
    if (const uint32_t needed = m->needed_attention_features(); needed != 0) {
        std::string what;
        for (const auto& [bit, name] : {std::pair{attention_softcap, "attention soft-capping"},
                                        {attention_window, "sliding-window attention"},
                                        {attention_mla, "multi-head latent attention"}}) {
            if ((needed & bit) != 0) what += (what.empty() ? "" : " and ") + std::string(name);
        }
        if (params.kv_cache) {
            return make_error(path + ": " + hp.architecture + " needs " + what + ", which the KV plugin " +
                              params.kv_cache->name() +
                              " does not do (kv_cache_call has neither); use the built-in KV pools (no kv.plugin)");
        }
        if ((needed & ~params.attention->features()) != 0) {
            return make_error(path + ": " + hp.architecture + " needs " + what + ", which attention plugin " +
                              params.attention->name() + " does not declare (troupe_attention_ops.features)" +
                              (hp.mla ? "; use plugins.attention: mla" : ""));
        }
    }
    if (!params.kv_cache && !params.attention->supports(params.kv_type)) {
        return make_error("attention plugin " + params.attention->name() + " does not take " +
                          (params.kv_type == kv_dtype::f16 ? "F16" : "F32") + " KV pools (kv.dtype)");
    }
    if (params.kv_cache) {
        if (params.kv_cache_layout) {
            m->kv_layout_ = *params.kv_cache_layout;
        } else {
            auto layout = params.kv_cache->layout(
                {hp.n_layers, hp.n_kv_heads, hp.head_dim, m->kv_.block_size, std::max(1, params.max_seqs)});
            if (!layout.ok()) return layout.err();
            m->kv_layout_ = *layout;
        }
        if (m->kv_layout_.window_tokens > 0) m->window_slots_.emplace(std::max(1, params.max_seqs));
    } else {
        m->kv_layout_ =
            hp.mla ? mla_kv_layout(*hp.mla, params.kv_type) : builtin_kv_layout(hp.kv_width(), params.kv_type);
    }
    // Built-in: a K and a V pool of [n_blocks, block_size, n_kv_heads, head_dim] elements of params.kv_type per
    // memory slot (one per layer, or per layer of the largest KV group: kv_groups.h). KV plugin:
    // [n_blocks][block_bytes] blocks, then the window slots, per layer.
    m->groups_ = kv_groups::of(hp, params.kv_window_release && !params.kv_cache);
    const size_t pool_bytes = static_cast<size_t>(m->kv_.n_blocks) * m->kv_.block_size *
                              static_cast<size_t>(hp.mla ? hp.mla->latent_width() : hp.kv_width()) *
                              kv_element_bytes(params.kv_type);
    const size_t blocks_bytes = static_cast<size_t>(m->kv_.n_blocks) * m->kv_layout_.block_bytes(m->kv_.block_size);
    const size_t windows_bytes =
        m->window_slots_ ? static_cast<size_t>(m->window_slots_->n_slots()) * m->kv_layout_.window_slot_bytes() : 0;
    // MLA: one latent pool per layer, no V pool.
    const size_t layer_bytes =
        params.kv_cache ? (blocks_bytes + windows_bytes + 63) / 64 * 64 : (hp.mla ? 1 : 2) * pool_bytes;
    if (hp.mla) m->mla_ws_ = std::make_shared<mla_workspace>();
    if (hp.moe) m->moe_ws_ = std::make_shared<moe_workspace>();
    m->layers_.resize(hp.n_layers);
    if (!m->kv_memory_.allocate(layer_bytes * m->groups_.n_slots)) {
        return make_error(path + ": cannot allocate " + std::to_string((layer_bytes * m->groups_.n_slots) >> 20) +
                          " MiB for the KV cache (kv.memory): " + std::strerror(errno));
    }
    for (int32_t i = 0; i < hp.n_layers; ++i) {
        const llama_layer_weights& lw = m->w_.layers[i];
        layer& l = m->layers_[i];
        const std::string p = "blk." + std::to_string(i) + ".";
        l.attn_norm = static_cast<const float*>(lw.attn_norm.data);
        l.ffn_norm = static_cast<const float*>(lw.ffn_norm.data);
        l.bq = static_cast<const float*>(lw.bq.data);
        l.bk = static_cast<const float*>(lw.bk.data);
        l.bv = static_cast<const float*>(lw.bv.data);
        l.post_attn_norm = static_cast<const float*>(lw.post_attn_norm.data);
        l.post_ffn_norm = static_cast<const float*>(lw.post_ffn_norm.data);
        l.window = hp.window_of(i);
        for (auto [w, name, dst] : {std::tuple{&lw.wq, "attn_q", &l.wq},
                                    {&lw.wk, "attn_k", &l.wk},
                                    {&lw.wv, "attn_v", &l.wv},
                                    {&lw.wo, "attn_output", &l.wo},
                                    {&lw.w_gate, "ffn_gate", &l.w_gate},
                                    {&lw.w_up, "ffn_up", &l.w_up},
                                    {&lw.w_down, "ffn_down", &l.w_down}}) {
            if (w->data == nullptr) continue;  // a part this layer's block kind does not have (MLA: q, k, v)
            if (status st = make(*w, p + name + ".weight", *dst); !st.ok()) return st.err();
        }
        if (hp.attention_of(i) == attention_block::mla) {
            auto block = mla_block::make(*hp.mla, lw.mla, i, p, make, m->mla_ws_);
            if (!block.ok()) return block.err();
            l.mla = std::move(*block);
        }
        if (hp.ffn_of(i) == ffn_block::moe) {
            auto moe = moe_ffn::make(*hp.moe, lw.moe, hp.dim, p, make, m->moe_ws_);
            if (!moe.ok()) return moe.err();
            l.moe = std::move(*moe);
        }
        if (params.kv_cache) {
            l.kv_blocks = m->kv_memory_.data() + static_cast<size_t>(i) * layer_bytes;
            l.kv_window = m->window_slots_ ? l.kv_blocks + blocks_bytes : nullptr;
        } else {
            uint8_t* at = m->kv_memory_.data() + static_cast<size_t>(m->groups_.slot_of[i]) * layer_bytes;
            l.k_pool = reinterpret_cast<float*>(at);
            l.v_pool = hp.mla ? nullptr : reinterpret_cast<float*>(at + pool_bytes);
        }
    }
    m->output_norm_ = static_cast<const float*>(m->w_.output_norm.data);
    if (status st =
            make(m->w_.output, m->w_.tied_output ? "token_embd.weight (tied output)" : "output.weight", m->output_);
        !st.ok()) {
        return st.err();
    }
    m->fuse_projections();
    if (params.copy_weights) {
        if (status st = m->place_weights(); !st.ok()) return st.err();
    }
    m->s_.reserve(64, hp);
    m->attach_taps(std::move(params.taps));
    return m;
}

void cpu_llama::attach_taps(std::shared_ptr<tap_sink> sink) {
    taps_ = std::move(sink);
    taps_wanted_ = taps_ ? taps_->wanted() & all_taps : 0;
}

status cpu_llama::tap(tap_point t, int32_t layer, const float* data, size_t n, size_t width) {
    if (!wants(t)) return {};
    const bool logit_rows = layer < 0;
    tap_data d{
        t, layer, static_cast<int64_t>(n), static_cast<int64_t>(width), data, s_.seq_ids.data(), s_.positions.data()};
    d.nodes = s_.drafts ? s_.nodes.data() : nullptr;
    if (logit_rows) {
        s_.out_seq_ids.resize(n);
        s_.out_positions.resize(n);
        s_.out_nodes.resize(n);
        for (size_t i = 0; i < n; ++i) {
            s_.out_seq_ids[i] = s_.seq_ids[s_.out_rows[i]];
            s_.out_positions[i] = s_.positions[s_.out_rows[i]];
            s_.out_nodes[i] = s_.nodes[s_.out_rows[i]];
        }
        d.seq_ids = s_.out_seq_ids.data();
        d.positions = s_.out_positions.data();
        d.nodes = s_.drafts ? s_.out_nodes.data() : nullptr;
    }
    return taps_->observe(d);
}

std::string cpu_llama::description() const {
    const llama_hparams& hp = w_.hp;
    std::string types;
    const ggml_type t = layers_.empty() ? w_.output.type : layers_[0].wo.stored_type();
    types = std::string(traits(t).name);
    return w_.file->path() + ": " + hp.architecture + ", " + std::to_string(hp.n_layers) + " layers, dim " +
           std::to_string(hp.dim) + ", " + std::to_string(hp.n_heads) + " heads / " + std::to_string(hp.n_kv_heads) +
           " kv heads" + (hp.mla ? " (MLA, latent " + std::to_string(hp.mla->latent_width()) + ")" : std::string()) +
           (hp.moe
                ? ", " + std::to_string(hp.moe->n_experts) + " experts (top " + std::to_string(hp.moe->n_used) +
                      (hp.moe->n_shared > 0 ? ", " + std::to_string(hp.moe->n_shared) + " shared" : std::string()) + ")"
                : std::string()) +
           ", vocab " + std::to_string(hp.n_vocab) + ", " + types + " weights" +
           (params_.activations == cpu::activation_recipe::float32 ? ", float activations" : "") + ", cpu (" +
           std::to_string(pool_->n_threads()) + " threads)";
}

size_t cpu_llama::kv_bytes_per_token() const {
    const size_t block = kv_layout_.block_bytes(kv_.block_size);
    return static_cast<size_t>(groups_.n_slots) * ((block + kv_.block_size - 1) / kv_.block_size);
}

void cpu_llama::forget(int64_t seq_id) {
    if (window_slots_) window_slots_->release(seq_id);
}

status cpu_llama::copy_blocks(std::span<const int32_t> src, std::span<const int32_t> dst) {
    if (params_.kv_cache) {
        return make_error("copy_blocks: the KV plugin " + params_.kv_cache->name() +
                          " keeps open blocks in per-sequence windows; blocks cannot be copied");
    }
    if (src.size() != dst.size()) {
        return make_error("copy_blocks: " + std::to_string(src.size()) + " sources for " + std::to_string(dst.size()) +
                          " destinations");
    }
    for (size_t i = 0; i < src.size(); ++i) {
        if (src[i] < 0 || src[i] >= kv_.n_blocks || dst[i] < 0 || dst[i] >= kv_.n_blocks) {
            return make_error("copy_blocks: block " + std::to_string(src[i]) + " -> " + std::to_string(dst[i]) +
                              " is outside the pool of " + std::to_string(kv_.n_blocks) + " blocks");
        }
    }
    // A block is block_size rows of a layer's K (and V) pool: one contiguous run of bytes per pool.
    const size_t block_bytes = static_cast<size_t>(kv_.block_size) *
                               static_cast<size_t>(w_.hp.mla ? w_.hp.mla->latent_width() : w_.hp.kv_width()) *
                               kv_element_bytes(params_.kv_type);
    for (const layer& l : layers_) {
        for (float* pool : {l.k_pool, l.v_pool}) {
            if (pool == nullptr) continue;  // MLA: no V pool
            auto* bytes = reinterpret_cast<uint8_t*>(pool);
            for (size_t i = 0; i < src.size(); ++i) {
                std::memcpy(bytes + static_cast<size_t>(dst[i]) * block_bytes,
                            bytes + static_cast<size_t>(src[i]) * block_bytes, block_bytes);
            }
        }
    }
    return {};
}

status cpu_llama::assign_window_slots(const forward_batch& batch) {
    std::vector<int64_t> ids(batch.seqs.size());
    std::vector<int32_t> pos0(batch.seqs.size());
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
        ids[i] = batch.seqs[i].seq_id;
        pos0[i] = batch.seqs[i].pos0;
    }
    if (status st = window_slots_->assign(ids, pos0, kv_.block_size, step_slots_, slots_to_zero_); !st.ok()) return st;
    const size_t slot_bytes = kv_layout_.window_slot_bytes();
    for (const layer& l : layers_) {
        for (const int32_t slot : slots_to_zero_)
            std::memset(l.kv_window + static_cast<size_t>(slot) * slot_bytes, 0, slot_bytes);
    }
    return {};
}

size_t cpu_llama::weight_bytes_per_token() const {
    size_t bytes = output_.n_bytes() + row_bytes(w_.token_embd.type, w_.hp.dim);
    for (const layer& l : layers_) {
        for (const linear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) bytes += m->n_bytes();
        if (l.mla) bytes += l.mla->weight_bytes();
        if (l.moe) bytes += l.moe->active_bytes_per_token();
        bytes += 2 * w_.hp.dim * sizeof(float);
    }
    return bytes + w_.hp.dim * sizeof(float);
}

int64_t cpu_llama::matmul_macs_per_token(bool with_output) const {
    int64_t macs = with_output ? output_.n_in() * output_.n_out() : 0;
    for (const layer& l : layers_) {
        for (const linear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
            macs += m->n_in() * m->n_out();
        if (l.mla) macs += l.mla->macs_per_token();
        if (l.moe) macs += l.moe->active_macs_per_token();
    }
    return macs;
}

int64_t cpu_llama::int8_macs_per_token(bool nibbles_only, bool with_output) const {
    const auto int8_macs = [nibbles_only](const linear& m) -> int64_t {
        if (m.by_plugin() || m.recipe() != cpu::activation_recipe::quantized) return 0;
        if (nibbles_only) return m.stored_type() == ggml_type::q4_0 && m.packed() ? m.n_in() * m.n_out() : 0;
        switch (m.stored_type()) {
            case ggml_type::q8_0:
            case ggml_type::q4_0:
            case ggml_type::q5_0:
            case ggml_type::q2_k:
            case ggml_type::q3_k:
            case ggml_type::q4_k:
            case ggml_type::q5_k:
            case ggml_type::q6_k:
                return m.n_in() * m.n_out();
            default:
                return 0;
        }
    };
    int64_t macs = with_output ? int8_macs(output_) : 0;
    for (const layer& l : layers_) {
        for (const linear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) macs += int8_macs(*m);
        if (l.moe) macs += l.moe->active_macs_per_token(int8_macs);
    }
    return macs;
}

status cpu_llama::check_batch(const forward_batch& batch) const {
    const int32_t bs = kv_.block_size;
    for (const sequence_step& s : batch.seqs) {
        const std::string id = "sequence " + std::to_string(s.seq_id);
        if (s.tokens.empty()) return make_error(id + ": no tokens in the step");
        const int64_t end = static_cast<int64_t>(s.pos0) + static_cast<int64_t>(s.tokens.size());
        if (s.pos0 < 0 || end > w_.hp.n_ctx) {
            return make_error(id + ": positions [" + std::to_string(s.pos0) + ", " + std::to_string(end) +
                              ") exceed the context of " + std::to_string(w_.hp.n_ctx));
        }
        if (status st = groups_.check(s, bs, kv_.n_blocks); !st.ok()) return st;
        for (int32_t t : s.tokens) {
            if (t < 0 || t >= w_.hp.n_vocab) {
                return make_error(id + ": token id " + std::to_string(t) + " outside the vocabulary of " +
                                  std::to_string(w_.hp.n_vocab));
            }
        }
        if (status st = check_drafts(s); !st.ok()) return st;
    }
    return {};
}

status cpu_llama::forward(const forward_batch& batch, forward_output& out) {
    if (status st = check_batch(batch); !st.ok()) return st;
    const llama_hparams& hp = w_.hp;
    size_t n = 0;
    for (const sequence_step& s : batch.seqs) n += s.tokens.size();
    s_.reserve(n, hp);

    std::vector<int32_t> ids(n);
    // [n_groups][sequences]: the block table each layer of a group reads.
    std::vector<std::vector<const int32_t*>> tables(groups_.n_groups(), std::vector<const int32_t*>(batch.seqs.size()));
    out.n_vocab = hp.n_vocab;
    out.row_begin.assign(batch.seqs.size(), 0);
    out.n_rows.assign(batch.seqs.size(), 0);
    s_.out_rows.clear();
    begin_tree_step(batch, n);
    size_t t = 0;
    for (size_t si = 0; si < batch.seqs.size(); ++si) {
        const sequence_step& s = batch.seqs[si];
        for (int32_t g = 0; g < groups_.n_groups(); ++g) tables[g][si] = kv_groups::table(s, g).data();
        out.row_begin[si] = static_cast<int32_t>(s_.out_rows.size());
        for (size_t i = 0; i < s.tokens.size(); ++i, ++t) {
            ids[t] = s.tokens[i];
            s_.positions[t] = s.pos0 + static_cast<int32_t>(i);
            s_.seq_of[t] = static_cast<int32_t>(si);
            s_.seq_ids[t] = s.seq_id;
            if (s.all_logits || i + 1 == s.tokens.size()) s_.out_rows.push_back(static_cast<int32_t>(t));
        }
        lay_out_drafts(s, t - s.tokens.size());  // nodes; a tree's positions, rows and masks
        out.n_rows[si] = static_cast<int32_t>(s_.out_rows.size()) - out.row_begin[si];
    }

    if (window_slots_) {
        if (status st = assign_window_slots(batch); !st.ok()) return st;
    }
    // The rotations, the same for every layer: llama.cpp's angles in its recipe (cpu_llama_layer.cpp).
    if (params_.activations == cpu::activation_recipe::quantized) {
        rope_angles_rows_ggml(s_.positions.data(), n, hp, s_.rope_cs.data());
    } else {
        rope_angles_rows(s_.positions.data(), n, hp, s_.rope_cs.data());
    }
    if (mla_ws_) mla_ws_->begin_step(*hp.mla, s_.positions.data(), n);
    embed_rows(w_.token_embd, ids.data(), n, s_.x.data());
    if (hp.embed_scale != 1.0f) scale_rows(s_.x.data(), hp.embed_scale, n * hp.dim);
    for (int32_t il = 0; il < hp.n_layers; ++il) {
        if (status st = run_layer(il, n, tables[groups_.group_of[il]]); !st.ok()) return st;
    }
    const size_t r = s_.out_rows.size();
    for (size_t i = 0; i < r; ++i) {
        std::copy_n(s_.x.data() + static_cast<size_t>(s_.out_rows[i]) * hp.dim, hp.dim, s_.rows.data() + i * hp.dim);
    }
    rmsnorm_rows(s_.rows.data(), output_norm_, s_.h.data(), r, hp.dim, hp.rms_eps);
    if (status st = tap(tap_point::output_norm, -1, s_.h.data(), r, hp.dim); !st.ok()) return st;
    out.logits.resize(r * static_cast<size_t>(hp.n_vocab));
    if (status st = output_.forward(s_.h.data(), out.logits.data(), static_cast<int64_t>(r), ctx_); !st.ok()) {
        return st;
    }
    if (hp.final_softcap > 0.0f) softcap_rows(out.logits.data(), hp.final_softcap, r * hp.n_vocab);
    return tap(tap_point::logits, -1, out.logits.data(), r, hp.n_vocab);
}

}  // namespace troupe
