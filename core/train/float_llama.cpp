#include "core/train/float_llama.h"

#include "core/model/llama_weights.h"
#include "kernels/ref/quants.h"

namespace troupe::train {
namespace {

std::vector<float> to_float(const weight_view& w) {
    std::vector<float> out(static_cast<size_t>(w.n_in * w.n_out));  // [n_out, n_in]
    for (int64_t r = 0; r < w.n_out; ++r) {
        ref::dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_stride, out.data() + r * w.n_in,
                            w.n_in);
    }
    return out;
}

float_layer to_float(const llama_layer_weights& l) {
    return float_layer{to_float(l.attn_norm), to_float(l.wq),     to_float(l.wk),   to_float(l.wv),    to_float(l.wo),
                       to_float(l.ffn_norm),  to_float(l.w_gate), to_float(l.w_up), to_float(l.w_down)};
}

}  // namespace

result<float_llama> read_float_llama(std::shared_ptr<const gguf::gguf_file> file, layers_wanted which) {
    auto w = bind_llama_weights(file);
    if (!w) return w.err();
    if (const std::string beyond = beyond_llama_graph(w->hp); !beyond.empty()) {
        return make_error(file->path() + ": distillation computes the llama graph only, and this model needs " +
                          beyond);
    }
    float_llama m;
    m.file = file;
    m.hp = w->hp;
    m.token_embd = to_float(w->token_embd);
    m.output_norm = to_float(w->output_norm);
    m.output = to_float(w->output);
    const size_t first = which == layers_wanted::all ? 0 : w->layers.size() - 1;
    for (size_t l = first; l < w->layers.size(); ++l) m.layers.push_back(to_float(w->layers[l]));
    return m;
}

}  // namespace troupe::train
