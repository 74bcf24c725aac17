// side_files: the GGUF files `troupe distill` writes (spec_design.md, "File formats") and the check that a side
// file was made for a given target.
//
// Every file carries `<arch>.target.{n_vocab, dim, n_layers}` (u32) and `<arch>.target.fingerprint` (string,
// core/gguf/target_fingerprint.h) of the target it was distilled from:
//   medusa: general.architecture = "medusa", medusa.n_heads, medusa.<i>.{fc.weight, fc.bias, output.weight}
//   eagle:  general.architecture = "eagle", eagle.{n_heads, n_kv_heads, ffn_length, rope.freq_base, rms_eps},
//           eagle.{fc.weight, fc.bias, attn_q/k/v/output.weight, ffn_norm.weight, ffn_gate/up/down.weight}
//   draft:  an ordinary llama file (llama.* hparams, the target's tokenizer.* keys), plus llama.target.*
// All tensors F32.
#pragma once

#include <string>

#include "core/gguf/gguf_file.h"
#include "core/model/llama_hparams.h"
#include "core/result.h"
#include "core/train/eagle_layer.h"
#include "core/train/medusa_heads.h"
#include "core/train/tiny_llama.h"

namespace troupe::train {

struct target_id {
    std::string fingerprint;
    llama_hparams hp;
};
result<target_id> identify_target(const gguf::gguf_file& target);

status write_medusa_file(const std::string& path, const medusa_heads& heads, const target_id& target);
status write_eagle_file(const std::string& path, eagle_layer& layer, const target_id& target);
// tokenizer: the target's file, whose tokenizer.* keys the drafter gets.
status write_draft_file(const std::string& path, tiny_llama& model, const gguf::gguf_file& tokenizer,
                        const target_id& target);

// Refuses a side file made for another model: "heads.gguf: made for another model (fingerprint X, dims ...), this
// target is Y (...)"; also refuses a file without the keys.
status check_made_for(const gguf::gguf_file& side, const gguf::gguf_file& target);

}  // namespace troupe::train
