#include "core/plugin_host/plugin_model_runners.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/log/log.h"
#include "core/model/kv_layout.h"
#include "core/model/llama_weights.h"

// The opaque C handle: one second model, loaded, and once the KV cache is sized, running.
struct troupe_model {
    std::string path;
    troupe::llama_weights weights;  // views into the mapped file (the runner gets a copy at start)
    size_t kv_bytes_per_token = 0;  // all layers
    double weight_bytes_per_token = 0;
    std::unique_ptr<troupe::cpu_llama> runner;  // null until start()
    troupe::forward_batch batch;                // [steps] reused by forward()
    troupe::forward_output out;
};

namespace troupe {
namespace {

std::string file_name(const std::string& path) {
    return std::filesystem::path(path).filename().string();
}

// A token's text for a message: printable bytes as they are, others as \xNN.
std::string quoted(const std::string& text) {
    std::string q = "'";
    for (unsigned char c : text) {
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
            q += static_cast<char>(c);
        } else {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02x", c);
            q += hex;
        }
    }
    return q + "'";
}

// One error naming both files and the first difference, or ok.
status same_vocabulary(const std::string& path, const tokenizer& mine, int32_t my_rows, const std::string& target_path,
                       const tokenizer& target, int32_t target_rows) {
    const std::string head = path + ": its vocabulary differs from the target's (" + target_path + "): ";
    if (mine.n_vocab() != target.n_vocab()) {
        return make_error(head + "n_vocab " + std::to_string(mine.n_vocab()) + " vs " +
                          std::to_string(target.n_vocab()) + "; a drafter must use the target's tokenizer");
    }
    for (int32_t id = 0; id < mine.n_vocab(); ++id) {
        const std::string& a = mine.token_to_piece(id);
        const std::string& b = target.token_to_piece(id);
        if (a != b) {
            return make_error(head + "token " + std::to_string(id) + " is " + quoted(a) + " here and " + quoted(b) +
                              " in the target; a drafter must use the target's tokenizer");
        }
    }
    if (my_rows != target_rows) {
        return make_error(head + "its output matrix has " + std::to_string(my_rows) + " rows, the target's " +
                          std::to_string(target_rows));
    }
    return {};
}

size_t matrix_bytes(const weight_view& w) {
    return static_cast<size_t>(w.n_out) * w.row_stride;
}

// Bytes of weights one decode step reads (as cpu_llama::weight_bytes_per_token counts them, from the file's types).
double weight_bytes_per_token(const llama_weights& w) {
    size_t bytes = matrix_bytes(w.output) + w.token_embd.row_stride + w.hp.dim * sizeof(float);
    for (const llama_layer_weights& l : w.layers) {
        for (const weight_view* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
            bytes += matrix_bytes(*m);
        }
        bytes += 2 * w.hp.dim * sizeof(float);
    }
    return static_cast<double>(bytes);
}

}  // namespace

plugin_model_runners::plugin_model_runners(std::shared_ptr<const gguf::gguf_file> target,
                                           std::shared_ptr<const tokenizer> target_tok, int32_t target_n_vocab,
                                           kv_dtype kv_type)
    : target_(std::move(target)),
      target_tok_(std::move(target_tok)),
      target_n_vocab_(target_n_vocab),
      kv_type_(kv_type) {}

plugin_model_runners::~plugin_model_runners() = default;

result<troupe_model*> plugin_model_runners::load(const std::string& path) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (started_) {
            return make_error(path + ": load_model after the KV cache was sized; a plugin loads its models in create");
        }
    }
    auto file = gguf::gguf_file::open(path);
    if (!file.ok()) return file.err();
    auto tok = tokenizer::from_gguf(**file);
    if (!tok.ok()) return make_error(path + ": " + tok.message());
    auto weights = bind_llama_weights(*file);
    if (!weights.ok()) return weights.err();
    if (status st = same_vocabulary(path, **tok, weights->hp.n_vocab, target_->path(), *target_tok_, target_n_vocab_);
        !st.ok()) {
        return st.err();
    }
    auto m = std::make_unique<troupe_model>();
    m->path = path;
    m->kv_bytes_per_token =
        static_cast<size_t>(weights->hp.n_layers) * builtin_kv_layout(weights->hp.kv_width(), kv_type_).bytes_per_token;
    m->weight_bytes_per_token = weight_bytes_per_token(*weights);
    m->weights = std::move(*weights);
    TROUPE_LOG_INFO("plugin_host", "second model %s loaded for a plugin: %d layers, dim %d, %zu KV bytes per token",
                    path.c_str(), m->weights.hp.n_layers, m->weights.hp.dim, m->kv_bytes_per_token);
    std::lock_guard<std::mutex> lock(mutex_);
    models_.push_back(std::move(m));
    return models_.back().get();
}

void plugin_model_runners::unload(troupe_model* model) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find_if(models_.begin(), models_.end(), [&](const auto& m) { return m.get() == model; });
    if (it == models_.end()) {
        TROUPE_LOG_WARN("plugin_host", "unload_model: a model that is not loaded (unloaded twice?) was ignored");
        return;
    }
    models_.erase(it);
}

status plugin_model_runners::info(const troupe_model* model, troupe_model_info& out) const {
    const llama_hparams& hp = model->weights.hp;
    out.n_vocab = hp.n_vocab;
    out.n_ctx = hp.n_ctx;
    out.n_layers = hp.n_layers;
    out.dim = hp.dim;
    out.kv_bytes_per_token = static_cast<int64_t>(model->kv_bytes_per_token);
    out.weight_bytes_per_token =
        model->runner ? static_cast<double>(model->runner->weight_bytes_per_token()) : model->weight_bytes_per_token;
    return {};
}

status plugin_model_runners::forward(troupe_model* model, std::span<const troupe_model_step> steps, float* logits) {
    if (!model->runner) {
        return make_error(model->path +
                          ": model_forward before the host started the model (the loader starts it once the KV cache "
                          "is sized; a plugin runs it from propose_batch or accepted)");
    }
    if (steps.empty()) return {};
    forward_batch& batch = model->batch;
    batch.seqs.resize(steps.size());
    for (size_t i = 0; i < steps.size(); ++i) {
        const troupe_model_step& c = steps[i];
        if (c.struct_size < sizeof(troupe_model_step) || c.tokens == nullptr || c.n_tokens <= 0 ||
            c.block_table == nullptr || c.n_blocks <= 0) {
            return make_error(model->path + ": model_forward step " + std::to_string(i) +
                              " needs struct_size, tokens (n_tokens > 0) and a block table (n_blocks > 0)");
        }
        sequence_step& s = batch.seqs[i];
        s.seq_id = c.seq_id;
        s.tokens.assign(c.tokens, c.tokens + c.n_tokens);
        s.pos0 = c.pos0;
        s.block_table.assign(c.block_table, c.block_table + c.n_blocks);
        s.all_logits = c.all_logits != 0;
        s.n_draft = 0;
        s.tree_parents.clear();
    }
    if (status st = model->runner->forward(batch, model->out); !st.ok()) {
        return make_error(model->path + ": " + st.message());
    }
    if (logits != nullptr) std::memcpy(logits, model->out.logits.data(), model->out.logits.size() * sizeof(float));
    return {};
}

size_t plugin_model_runners::kv_bytes_per_token() const {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t bytes = 0;
    for (const auto& m : models_) bytes += m->kv_bytes_per_token;
    return bytes;
}

size_t plugin_model_runners::size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return models_.size();
}

std::string plugin_model_runners::describe() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string d;
    for (const auto& m : models_) {
        char line[160];
        std::snprintf(line, sizeof line, "%s%s (%d layers, %zu B/token)", d.empty() ? "" : ", ",
                      file_name(m->path).c_str(), m->weights.hp.n_layers, m->kv_bytes_per_token);
        d += line;
    }
    return d;
}

status plugin_model_runners::start(const cpu_llama_params& params) {
    std::lock_guard<std::mutex> lock(mutex_);
    started_ = true;
    params_ = params;
    params_.taps = nullptr;  // a second model is not observed (its plugin sees its logits)
    params_.kv_cache = nullptr;
    params_.kv_cache_layout.reset();
    params_.kv_type = kv_type_;
    for (const auto& m : models_) {
        if (m->runner) continue;
        auto runner = cpu_llama::create(m->weights, params_);
        if (!runner.ok()) return make_error(m->path + ": " + runner.message());
        m->runner = std::move(*runner);
        TROUPE_LOG_INFO("plugin_host", "second model runs: %s, KV pools parallel to the target's (%d blocks of %d)",
                        m->runner->description().c_str(), m->runner->kv().n_blocks, m->runner->kv().block_size);
    }
    return {};
}

}  // namespace troupe
