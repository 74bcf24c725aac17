// grow_model: writes a grown Llama (see grow_model.h; the placement is grow_layout.h).
#include "cli/grow_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>
#include <utility>
#include <vector>

#include "core/gguf/gguf_writer.h"
#include "core/model/llama_weights.h"
#include "kernels/ref/quants.h"

namespace troupe::cli {
namespace {

// Runs fn(begin, end) over [0, n) split across up to n_threads threads.
template <typename Fn>
void parallel_rows(int64_t n, int n_threads, const Fn& fn) {
    const int64_t n_workers = std::clamp<int64_t>(n / 16, 1, n_threads);
    std::vector<std::thread> threads;
    for (int64_t t = 1; t < n_workers; ++t) threads.emplace_back(fn, n * t / n_workers, n * (t + 1) / n_workers);
    fn(0, n / n_workers);
    for (auto& th : threads) th.join();
}

// Where a source matrix's elements go in a target matrix: source row r to target rows (several where a kv head is
// copied into several), source column c to target column col_of[c], times scale.
struct placement {
    const weight_view* source = nullptr;            // null: every element is new (an identity layer's matrix)
    std::vector<std::pair<int32_t, int32_t>> rows;  // (target row, source row)
    std::vector<int32_t> col_of;                    // [source n_in]
    float scale = 1.0f;
};

std::vector<int32_t> iota(int32_t n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
    return v;
}

std::vector<std::pair<int32_t, int32_t>> same_rows(int32_t n) {
    std::vector<std::pair<int32_t, int32_t>> v(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = {i, i};
    return v;
}

class grower {
public:
    grower(const grow_params& p, const llama_weights& src, const grow_layout& g, gguf::gguf_writer& w)
        : p_(p),
          src_(src),
          g_(g),
          w_(w),
          n_threads_(p.n_threads > 0 ? p.n_threads
                                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {}

    void write_tensors() {
        const auto& s = g_.source;
        const auto& t = g_.target;
        matrix("token_embd.weight", t.dim, t.n_vocab, {&src_.token_embd, same_rows(s.n_vocab), iota(s.dim)});
        for (int32_t l = 0; l < t.n_layers; ++l) layer(l);
        norm("output_norm.weight", &src_.output_norm);
        if (!src_.tied_output)
            matrix("output.weight", t.dim, t.n_vocab, {&src_.output, same_rows(s.n_vocab), iota(s.dim)});
    }

    int64_t n_params() const { return n_params_; }

private:
    void layer(int32_t l) {
        const auto& s = g_.source;
        const auto& t = g_.target;
        const std::string b = "blk." + std::to_string(l) + ".";
        const int32_t sl = g_.source_layer[static_cast<size_t>(l)];
        const llama_layer_weights* lw = sl >= 0 ? &src_.layers[static_cast<size_t>(sl)] : nullptr;
        // Source layer: matrix m of it at its places; identity layer: every element new.
        auto place = [&](weight_view llama_layer_weights::*m, std::vector<std::pair<int32_t, int32_t>> rows,
                         std::vector<int32_t> cols, float scale = 1.0f) {
            return lw ? placement{&(lw->*m), std::move(rows), std::move(cols), scale} : placement{};
        };
        std::vector<std::pair<int32_t, int32_t>> q_rows, kv_rows;
        std::vector<int32_t> q_cols(static_cast<size_t>(s.q_width()));
        for (int32_t r = 0; r < s.q_width(); ++r) {
            q_rows.emplace_back(g_.q_index(r), r);
            q_cols[static_cast<size_t>(r)] = g_.q_index(r);
        }
        for (int32_t h = 0; h < t.n_kv_heads; ++h) {
            const int32_t j = g_.kv_source[static_cast<size_t>(h)];
            if (j < 0) continue;
            for (int32_t e = 0; e < s.head_dim; ++e) {
                kv_rows.emplace_back(h * t.head_dim + g_.head_dim_of[static_cast<size_t>(e)], j * s.head_dim + e);
            }
        }
        using w = llama_layer_weights;
        norm(b + "attn_norm.weight", lw ? &lw->attn_norm : nullptr);
        matrix(b + "attn_q.weight", t.dim, t.q_width(), place(&w::wq, q_rows, iota(s.dim), g_.q_scale));
        matrix(b + "attn_k.weight", t.dim, t.kv_width(), place(&w::wk, kv_rows, iota(s.dim)));
        matrix(b + "attn_v.weight", t.dim, t.kv_width(), place(&w::wv, kv_rows, iota(s.dim)));
        matrix(b + "attn_output.weight", t.q_width(), t.dim, place(&w::wo, same_rows(s.dim), q_cols));
        norm(b + "ffn_norm.weight", lw ? &lw->ffn_norm : nullptr);
        matrix(b + "ffn_gate.weight", t.dim, t.ffn_dim, place(&w::w_gate, same_rows(s.ffn_dim), iota(s.dim)));
        matrix(b + "ffn_up.weight", t.dim, t.ffn_dim, place(&w::w_up, same_rows(s.ffn_dim), iota(s.dim)));
        matrix(b + "ffn_down.weight", t.ffn_dim, t.dim, place(&w::w_down, same_rows(s.dim), iota(s.ffn_dim)));
    }

    // A norm vector [target dim]: the source's weights times norm_scale, norm_scale on new channels.
    void norm(const std::string& name, const weight_view* source) {
        std::vector<float> v(static_cast<size_t>(g_.target.dim), g_.norm_scale);
        if (source) {
            const auto* x = static_cast<const float*>(source->data);
            for (int32_t c = 0; c < g_.source.dim; ++c) v[static_cast<size_t>(c)] = x[c] * g_.norm_scale;
        }
        w_.add_tensor_f32(name, {g_.target.dim}, v);
        n_params_ += g_.target.dim;
        ++n_tensors_;
    }

    // A matrix [n_rows, n_in]: noise on every element, then the source's elements at their places; stored in the
    // requested type (F16 where n_in is not a multiple of its block size).
    void matrix(const std::string& name, int64_t n_in, int64_t n_rows, const placement& pl) {
        const uint64_t tensor = n_tensors_++;
        std::vector<float> m(static_cast<size_t>(n_in * n_rows), 0.0f);  // [n_rows, n_in]
        if (p_.noise != 0.0f) {
            const auto std_dev = static_cast<float>(p_.noise / std::sqrt(static_cast<double>(n_in)));
            parallel_rows(n_rows, n_threads_, [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                    random_row(p_.seed, tensor, static_cast<uint64_t>(r), std_dev, m.data() + r * n_in, n_in);
                }
            });
        }
        if (pl.source) {
            std::vector<float> row(static_cast<size_t>(pl.source->n_in));  // [source n_in]
            for (const auto& [target_row, source_row] : pl.rows) {
                const auto* bytes = static_cast<const uint8_t*>(pl.source->data) + pl.source->row_stride * source_row;
                ref::dequantize_row(pl.source->type, bytes, row.data(), pl.source->n_in);
                float* out = m.data() + static_cast<int64_t>(target_row) * n_in;
                for (size_t c = 0; c < row.size(); ++c) out[pl.col_of[c]] = row[c] * pl.scale;
            }
        }
        const ggml_type type = n_in % traits(p_.type).block_size == 0 ? p_.type : ggml_type::f16;
        const size_t rb = row_bytes(type, n_in);
        std::vector<uint8_t> bytes(rb * static_cast<size_t>(n_rows));
        parallel_rows(n_rows, n_threads_, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
                ref::quantize_row(type, m.data() + r * n_in, bytes.data() + static_cast<size_t>(r) * rb, n_in);
            }
        });
        w_.add_tensor(name, type, {n_in, n_rows}, std::move(bytes));
        n_params_ += n_in * n_rows;
    }

    const grow_params& p_;
    const llama_weights& src_;
    const grow_layout& g_;
    gguf::gguf_writer& w_;
    int n_threads_;
    uint64_t n_tensors_ = 0;
    int64_t n_params_ = 0;
};

void write_metadata(const grow_params& p, const gguf::gguf_file& source, const grow_layout& g, gguf::gguf_writer& w) {
    const llama_hparams& t = g.target;
    w.set_string("general.architecture", "llama");
    w.set_string("general.name", "troupe-grown-" + std::string(p.shape.name) + " from " +
                                     source.string_or("general.name", std::filesystem::path(source.path()).filename()));
    if (p.type != ggml_type::w4_g64 && p.type != ggml_type::w4_g128)
        w.set_u32("general.file_type", gguf_file_type(p.type));
    if (p.type != ggml_type::f32 && p.type != ggml_type::f16) w.set_u32("general.quantization_version", 2);
    w.set_u32("llama.context_length", static_cast<uint32_t>(t.n_ctx));
    w.set_u32("llama.embedding_length", static_cast<uint32_t>(t.dim));
    w.set_u32("llama.block_count", static_cast<uint32_t>(t.n_layers));
    w.set_u32("llama.feed_forward_length", static_cast<uint32_t>(t.ffn_dim));
    w.set_u32("llama.attention.head_count", static_cast<uint32_t>(t.n_heads));
    w.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(t.n_kv_heads));
    w.set_u32("llama.rope.dimension_count", static_cast<uint32_t>(t.rope_dims));
    w.set_f32("llama.attention.layer_norm_rms_epsilon", t.rms_eps);
    w.set_f32("llama.rope.freq_base", t.rope_base);
    if (t.rope_scale != 1.0f) {
        w.set_string("llama.rope.scaling.type", "linear");
        w.set_f32("llama.rope.scaling.factor", 1.0f / t.rope_scale);
    }
    w.set_u32("llama.vocab_size", static_cast<uint32_t>(t.n_vocab));
    w.set_string("troupe.grow.source", std::filesystem::path(source.path()).filename());
    w.set_f32("troupe.grow.noise", p.noise);
    w.set_scalar("troupe.grow.seed", p.seed);
    w.copy_metadata(source, "tokenizer.");
}

}  // namespace

result<grow_summary> write_grown_model(const grow_params& p, const std::string& source_path,
                                       const std::string& out_path) {
    auto file = gguf::gguf_file::open(source_path);
    if (!file) return make_error(file.message());
    const gguf::gguf_file& f = **file;
    const std::string arch = f.string_or("general.architecture", "");
    if (arch != "llama" && arch != "mistral") {
        return make_error(source_path + ": general.architecture is '" + arch +
                          "'; --grow-from takes a dense Llama (llama or mistral)");
    }
    if (f.uint_or(arch + ".expert_count", 0) > 0) {
        return make_error(source_path + ": a mixture-of-experts model (" + arch +
                          ".expert_count > 0) cannot be grown; --grow-from takes a dense Llama");
    }
    auto weights = bind_llama_weights(*file);
    if (!weights) return make_error(weights.message() + " (--grow-from takes a dense Llama)");
    auto layout = plan_growth(weights->hp, p.shape, source_path);
    if (!layout) return layout.err();

    gguf::gguf_writer w;
    write_metadata(p, f, *layout, w);
    grower g(p, *weights, *layout, w);
    g.write_tensors();
    if (auto st = w.write(out_path); !st) return st.err();
    auto written = gguf::gguf_file::open(out_path);
    if (!written) return make_error("wrote " + out_path + " but cannot read it back: " + written.message());
    return grow_summary{*layout, g.n_params(), (*written)->file_size()};
}

}  // namespace troupe::cli
