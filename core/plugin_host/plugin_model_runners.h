// plugin_model_runners: the second models a plugin has the host run (troupe_model_services version 2, tensors.h),
// e.g. a draft model for speculative decoding. Loaded through troupe's own loader (gguf, tokenizer,
// bind_llama_weights, cpu_llama with the target's attention and quant plugins), run beside the target on its lane.
//
//   spec plugin create ── load(path) ──► gguf + tokenizer + weights; refused unless its vocabulary is the target's;
//                                         its KV bytes per token are known, no runner yet
//   model_loader ──────── kv_bytes_per_token() ──► added to the target's when the KV pool is sized: one budget
//                                                  holds both, so there are fewer blocks
//                ──────── start(params) ──► each model's cpu_llama over the target's block geometry (the same block
//                                           ids, block size and n_blocks: pools parallel to the target's), on the
//                                           target's thread pool (params.pool)
//   propose_batch ─────── forward(steps) ──► cpu_llama::forward with the target sequences' block tables
//
// A model's KV rows live in blocks the target's allocator hands out, so what is in them is the plugin's to track
// (a block freed and reused by another sequence holds stale drafter rows until that sequence's rows are written).
// Loading happens on the loading thread, everything else on the executor's lane; a mutex guards the set of models.
#pragma once

#include <troupe/tensors.h>

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/gguf/gguf_file.h"
#include "core/model/cpu_llama.h"
#include "core/result.h"
#include "core/tokenizer/tokenizer.h"

namespace troupe {

class plugin_model_runners {
public:
    // `target`: the target's file, tokenizer and vocabulary (rows of its output matrix); `kv_type`: the element type
    // of the KV pools (kv.dtype), which the second models' pools share.
    plugin_model_runners(std::shared_ptr<const gguf::gguf_file> target, std::shared_ptr<const tokenizer> target_tok,
                         int32_t target_n_vocab, kv_dtype kv_type);
    ~plugin_model_runners();
    plugin_model_runners(const plugin_model_runners&) = delete;
    plugin_model_runners& operator=(const plugin_model_runners&) = delete;

    // Loads the GGUF at `path`; refuses one whose vocabulary differs from the target's, naming both files and the
    // first difference. Only before start().
    result<troupe_model*> load(const std::string& path);
    void unload(troupe_model* model);
    status info(const troupe_model* model, troupe_model_info& out) const;
    // Runs the steps (one sequence each) and writes their logits rows, in step order, to `logits`.
    status forward(troupe_model* model, std::span<const troupe_model_step> steps, float* logits);

    // KV bytes per token of every loaded model, all layers, counted beside the target's in the KV budget.
    size_t kv_bytes_per_token() const;
    // How many models are loaded ("" when none: the target's pool is sized as without).
    size_t size() const;
    std::string describe() const;  // "draft.gguf (2 layers, 2.0 KiB/token)", for the KV summary
    // Creates each model's runner with `params` (attention, quant, kernels, the target's kv geometry and pool).
    status start(const cpu_llama_params& params);

private:
    std::shared_ptr<const gguf::gguf_file> target_;
    std::shared_ptr<const tokenizer> target_tok_;
    int32_t target_n_vocab_;
    kv_dtype kv_type_;
    mutable std::mutex mutex_;
    std::vector<std::unique_ptr<troupe_model>> models_;  // guarded by mutex_
    bool started_ = false;
    cpu_llama_params params_;  // what start() was given; a model loaded later is refused
};

}  // namespace troupe
