// grow_layout: the placement of a source Llama's weights in a larger shape (see grow_layout.h).
#include "cli/grow_layout.h"

#include <algorithm>
#include <cmath>

namespace troupe::cli {
namespace {

std::string count_problem(const char* what, int64_t target, int64_t source) {
    return std::string(what) + " " + std::to_string(target) + " < the source's " + std::to_string(source);
}

}  // namespace

int32_t grow_layout::q_index(int32_t r) const {
    const int32_t head = r / source.head_dim;
    const int32_t e = r % source.head_dim;
    return q_head_of[static_cast<size_t>(head)] * target.head_dim + head_dim_of[static_cast<size_t>(e)];
}

int32_t grow_layout::n_identity_layers() const {
    return static_cast<int32_t>(std::count(source_layer.begin(), source_layer.end(), -1));
}

result<grow_layout> plan_growth(const llama_hparams& s, const synth_shape& shape, const std::string& what) {
    std::vector<std::string> problems;
    if (shape.dim < s.dim) problems.push_back(count_problem("dim", shape.dim, s.dim));
    if (shape.n_layers < s.n_layers) problems.push_back(count_problem("layers", shape.n_layers, s.n_layers));
    if (shape.n_heads < s.n_heads) problems.push_back(count_problem("heads", shape.n_heads, s.n_heads));
    if (shape.ffn < s.ffn_dim) problems.push_back(count_problem("FFN units", shape.ffn, s.ffn_dim));
    const int32_t head_dim = shape.dim / shape.n_heads;
    if (head_dim % s.head_dim != 0) {
        problems.push_back("head size " + std::to_string(head_dim) + " is not a multiple of the source's " +
                           std::to_string(s.head_dim));
    }
    if (s.rope != rope_mode::normal) problems.push_back("only sources with adjacent-pair RoPE (llama's) can be grown");

    grow_layout g;
    g.source = s;
    // GQA groups: each source kv head takes ceil(g_s / g_t) target kv heads, in order.
    const int32_t g_s = s.n_heads / s.n_kv_heads;
    const int32_t g_t = shape.n_heads / shape.n_kv_heads;
    const int32_t kv_per_source = (g_s + g_t - 1) / g_t;
    if (s.n_kv_heads * kv_per_source > shape.n_kv_heads) {
        problems.push_back(std::to_string(shape.n_kv_heads) + " kv heads of " + std::to_string(g_t) +
                           " q heads each cannot hold the source's " + std::to_string(s.n_kv_heads) + " kv heads of " +
                           std::to_string(g_s) + " q heads (it needs " + std::to_string(s.n_kv_heads * kv_per_source) +
                           ")");
    }
    if (!problems.empty()) {
        std::string message = what + ": cannot grow into shape " + std::string(shape.name) + " (dim " +
                              std::to_string(shape.dim) + ", " + std::to_string(shape.n_layers) + " layers, " +
                              std::to_string(shape.n_heads) + "/" + std::to_string(shape.n_kv_heads) + " heads, FFN " +
                              std::to_string(shape.ffn) + "):";
        for (const auto& p : problems) message += " " + p + ";";
        message.back() = '.';
        return make_error(message + " Choose a shape at least as large as the source in every dimension.");
    }

    llama_hparams& t = g.target;
    t.architecture = "llama";
    t.n_vocab = s.n_vocab;
    t.n_ctx = std::max(s.n_ctx, shape.n_ctx);
    t.dim = shape.dim;
    t.n_layers = shape.n_layers;
    t.n_heads = shape.n_heads;
    t.n_kv_heads = shape.n_kv_heads;
    t.head_dim = head_dim;
    t.ffn_dim = shape.ffn;
    t.rms_eps = static_cast<float>(double{s.rms_eps} * s.dim / shape.dim);
    t.rope_base = s.rope_base;
    t.rope_scale = s.rope_scale;
    t.rope = rope_mode::normal;
    const int32_t k = head_dim / s.head_dim;
    t.rope_dims = s.rope_dims * k;
    g.q_scale = static_cast<float>(std::sqrt(static_cast<double>(k)));
    g.norm_scale = static_cast<float>(std::sqrt(static_cast<double>(s.dim) / shape.dim));

    g.head_dim_of.resize(static_cast<size_t>(s.head_dim));
    for (int32_t e = 0; e < s.head_dim; ++e) {
        g.head_dim_of[static_cast<size_t>(e)] =
            e < s.rope_dims ? (e / 2) * 2 * k + e % 2 : t.rope_dims + e - s.rope_dims;
    }

    g.q_head_of.assign(static_cast<size_t>(s.n_heads), -1);
    g.kv_source.assign(static_cast<size_t>(t.n_kv_heads), -1);
    int32_t next_kv = 0;
    for (int32_t j = 0; j < s.n_kv_heads; ++j) {
        for (int32_t first = 0; first < g_s; first += g_t, ++next_kv) {
            g.kv_source[static_cast<size_t>(next_kv)] = j;
            for (int32_t i = 0; i < g_t && first + i < g_s; ++i) {
                g.q_head_of[static_cast<size_t>(j * g_s + first + i)] = next_kv * g_t + i;
            }
        }
    }

    g.layer_of.resize(static_cast<size_t>(s.n_layers));
    g.source_layer.assign(static_cast<size_t>(t.n_layers), -1);
    for (int32_t i = 0; i < s.n_layers; ++i) {
        const auto l = static_cast<int32_t>(static_cast<int64_t>(i) * t.n_layers / s.n_layers);
        g.layer_of[static_cast<size_t>(i)] = l;
        g.source_layer[static_cast<size_t>(l)] = i;
    }
    return g;
}

}  // namespace troupe::cli
