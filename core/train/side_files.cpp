#include "core/train/side_files.h"

#include "core/gguf/gguf_writer.h"
#include "core/gguf/target_fingerprint.h"

namespace troupe::train {
namespace {

void set_target_keys(gguf::gguf_writer& w, const std::string& arch, const target_id& t) {
    w.set_u32(arch + ".target.n_vocab", static_cast<uint32_t>(t.hp.n_vocab));
    w.set_u32(arch + ".target.dim", static_cast<uint32_t>(t.hp.dim));
    w.set_u32(arch + ".target.n_layers", static_cast<uint32_t>(t.hp.n_layers));
    w.set_string(arch + ".target.fingerprint", t.fingerprint);
}

void add(gguf::gguf_writer& w, const param& p) {
    w.add_tensor_f32(p.name, p.dims, p.value);
}

std::string dims_text(uint64_t n_vocab, uint64_t dim, uint64_t n_layers) {
    return "n_vocab " + std::to_string(n_vocab) + ", dim " + std::to_string(dim) + ", n_layers " +
           std::to_string(n_layers);
}

}  // namespace

result<target_id> identify_target(const gguf::gguf_file& target) {
    auto fp = target_fingerprint(target);
    if (!fp) return fp.err();
    auto hp = read_llama_hparams(target);
    if (!hp) return hp.err();
    return target_id{*fp, *hp};
}

status write_medusa_file(const std::string& path, const medusa_heads& heads, const target_id& target) {
    gguf::gguf_writer w;
    w.set_string("general.architecture", "medusa");
    w.set_string("general.name", "troupe-distill-medusa");
    w.set_u32("medusa.n_heads", static_cast<uint32_t>(heads.n_heads()));
    set_target_keys(w, "medusa", target);
    for (int32_t i = 0; i < heads.n_heads(); ++i) {
        add(w, heads.head(i).fc_w);
        add(w, heads.head(i).fc_b);
        add(w, heads.head(i).out_w);
    }
    return w.write(path);
}

status write_eagle_file(const std::string& path, eagle_layer& layer, const target_id& target) {
    gguf::gguf_writer w;
    const llama_hparams& hp = layer.hp();
    w.set_string("general.architecture", "eagle");
    w.set_string("general.name", "troupe-distill-eagle");
    set_target_keys(w, "eagle", target);
    w.set_u32("eagle.n_heads", static_cast<uint32_t>(hp.n_heads));
    w.set_u32("eagle.n_kv_heads", static_cast<uint32_t>(hp.n_kv_heads));
    w.set_u32("eagle.ffn_length", static_cast<uint32_t>(hp.ffn_dim));
    w.set_f32("eagle.rope.freq_base", hp.rope_base);
    w.set_f32("eagle.rms_eps", hp.rms_eps);
    for (const param* p : layer.params()) add(w, *p);
    return w.write(path);
}

status write_draft_file(const std::string& path, tiny_llama& model, const gguf::gguf_file& tokenizer,
                        const target_id& target) {
    gguf::gguf_writer w;
    const llama_hparams& hp = model.hp();
    w.set_string("general.architecture", "llama");
    w.set_string("general.name", "troupe-distill-draft");
    w.set_u32("general.file_type", 0);  // all F32
    w.set_u32("llama.context_length", static_cast<uint32_t>(hp.n_ctx));
    w.set_u32("llama.embedding_length", static_cast<uint32_t>(hp.dim));
    w.set_u32("llama.block_count", static_cast<uint32_t>(hp.n_layers));
    w.set_u32("llama.feed_forward_length", static_cast<uint32_t>(hp.ffn_dim));
    w.set_u32("llama.attention.head_count", static_cast<uint32_t>(hp.n_heads));
    w.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(hp.n_kv_heads));
    w.set_u32("llama.rope.dimension_count", static_cast<uint32_t>(hp.rope_dims));
    w.set_f32("llama.attention.layer_norm_rms_epsilon", hp.rms_eps);
    w.set_f32("llama.rope.freq_base", hp.rope_base);
    w.set_u32("llama.vocab_size", static_cast<uint32_t>(hp.n_vocab));
    set_target_keys(w, "llama", target);
    w.copy_metadata(tokenizer, "tokenizer.");
    for (const param* p : model.params()) add(w, *p);
    return w.write(path);
}

status check_made_for(const gguf::gguf_file& side, const gguf::gguf_file& target) {
    const std::string arch = side.string_or("general.architecture", "");
    auto fp = side.get_string(arch + ".target.fingerprint");
    if (!fp) {
        return make_error(side.path() + ": no " + arch + ".target.fingerprint: not a file made by troupe distill " +
                          "for a target (expected the keys " + arch + ".target.{fingerprint, n_vocab, dim, n_layers})");
    }
    auto mine = identify_target(target);
    if (!mine) return make_error(mine.message());
    if (*fp == mine->fingerprint) return {};
    return make_error(side.path() + ": made for another model (fingerprint " + *fp + ", " +
                      dims_text(side.uint_or(arch + ".target.n_vocab", 0), side.uint_or(arch + ".target.dim", 0),
                                side.uint_or(arch + ".target.n_layers", 0)) +
                      "), this target " + target.path() + " is " + mine->fingerprint + " (" +
                      dims_text(mine->hp.n_vocab, mine->hp.dim, mine->hp.n_layers) + ")");
}

}  // namespace troupe::train
