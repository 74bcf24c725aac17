// distill: the training loops of `troupe distill` over a self-distillation data set (distill_data.h), one per kind
// of drafter, and the held-out accuracy each reports (what a speculative plugin's acceptance will follow).
//
// Common: AdamW (adam.h) with the global gradient norm clipped at 1, a linear warm-up over the first tenth of the
// steps (at most 20) then a cosine decay to a tenth of lr; batches drawn with a generator seeded by `seed`; one
// curve point per step.
//   medusa: per step and head, `batch` random positions j of the training samples where the head's label exists;
//           head i's logits at j against the target's logits at j + i + 1 (the distribution of t_{j+i+2}).
//   eagle:  whole sequences until `batch` rows; rows j = 0 .. n-2 (eagle_layer.h); KL against the target's logits
//           at j + 1, plus feature_weight · smooth-L1(g_j, h_{j+1}); with eagle_passes P > 1 each sequence is also
//           run P - 1 more times, pass u's row j fed pass u - 1's output g_{j-1} (detached), attending as the
//           drafter's depth-u row does, with the same targets as row j: the layer learns from its own features.
//   draft:  whole sequences until `batch` rows; the student's logits at every position against the target's.
// Accuracy: the share of held-out positions whose argmax equals the target's argmax for the same token (greedy
// acceptance of that draft position when the earlier ones were accepted).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/train/distill_data.h"
#include "core/train/eagle_layer.h"
#include "core/train/float_llama.h"
#include "core/train/loss_curve.h"
#include "core/train/losses.h"
#include "core/train/medusa_heads.h"
#include "core/train/tiny_llama.h"
#include "kernels/cpu/thread_pool.h"

namespace troupe::train {

struct train_params {
    int32_t steps = 300;
    float lr = 1e-3f;
    int32_t batch = 256;  // rows per step (per head for medusa)
    distill_loss loss = distill_loss::kl;
    float hard_weight = 1.0f;  // weight of the hard-label cross-entropy in kl+hard
    // EAGLE: weight of the smooth-L1 feature loss. 1 drafts best over two tokens on stories260K (400 steps, held-out
    // top-1 of the first / second draft): 0 -> 0.467 / 0.127, 0.1 -> 0.462 / 0.178, 1 -> 0.468 / 0.282,
    // 3 -> 0.460 / 0.290, 10 -> 0.428 / 0.347.
    float feature_weight = 1.0f;
    // EAGLE: draft depths trained together (EAGLE-3's training-time test, attention.h "Passes"): depth 2 rows take
    // the layer's own output at the position before in place of the target's feature, as drafting past the
    // verified context does. 1 trains on the target's features only.
    int32_t eagle_passes = 2;
    uint64_t seed = 1;
};

using progress_fn = std::function<void(const curve_point&)>;

// The lr multiplier of step (0-based) of n.
float lr_schedule(int32_t step, int32_t n_steps);

// f = rmsnorm(hidden) · output_norm for every row of a sample: [n, dim].
std::vector<float> normed_features(const distill_sample& s, const float_llama& target);

std::vector<curve_point> train_medusa(medusa_heads& heads, const float_llama& target, const distill_dataset& data,
                                      const train_params& p, cpu::thread_pool& pool, const progress_fn& progress);
// Per head.
std::vector<double> medusa_accuracy(const medusa_heads& heads, const float_llama& target,
                                    const std::vector<distill_sample>& samples, cpu::thread_pool& pool);

// The rows of the given samples (eagle_layer.h), with the targets' logits [N, n_vocab], the features to regress
// [N, dim] and the hard labels [N] (-1 where the sample ends).
struct eagle_rows {
    eagle_batch batch;
    std::vector<float> target_logits;
    std::vector<float> target_features;
    std::vector<int32_t> labels;
};
eagle_rows make_eagle_rows(const std::vector<const distill_sample*>& samples, int32_t dim, int32_t n_vocab);
std::vector<curve_point> train_eagle(eagle_layer& layer, const distill_dataset& data, const train_params& p,
                                     cpu::thread_pool& pool, const progress_fn& progress);
double eagle_accuracy(eagle_layer& layer, const std::vector<distill_sample>& samples, cpu::thread_pool& pool);
// Row block u of `rows` stacked as training stacks it (distill.h, eagle): block 1 the rows as they are, block u > 1
// fed the output of block u - 1 at the position before, taken from g_before ([rows, passes - 1 blocks, dim]).
eagle_batch stack_passes(const eagle_batch& rows, int32_t passes, const std::vector<float>& g_before, int32_t dim);
// Greedy chain drafting as the plugin does it, on held-out samples: after the context ending at each row, drafts of
// depth 1 .. depth, each fed the one before's token and output feature. Entry u - 1: the share of depth-u drafts
// that equal the target's greedy token among the chains whose drafts 1 .. u - 1 all did (and whose sample goes on
// with those tokens): what the plugin's accept(u) follows on a chain.
std::vector<double> eagle_chain_accuracy(eagle_layer& layer, const std::vector<distill_sample>& samples, int32_t depth,
                                         cpu::thread_pool& pool);

std::vector<curve_point> train_draft(tiny_llama& model, const distill_dataset& data, const train_params& p,
                                     cpu::thread_pool& pool, const progress_fn& progress);
double draft_accuracy(tiny_llama& model, const std::vector<distill_sample>& samples, cpu::thread_pool& pool);

}  // namespace troupe::train
