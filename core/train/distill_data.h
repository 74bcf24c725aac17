// distill_data: the self-distillation data set, made by the target itself and kept in memory.
//
// Openings come from the lines of a text file (blank lines and `<|endofstory|>` separators skipped): each line is
// tokenized with BOS, and its first open_tokens, open_tokens + open_stride, ... tokens are openings (a line shorter
// than open_tokens is one opening). The target continues each opening by gen_tokens tokens (sampled at the given
// temperature from a generator seeded by (seed, opening), greedy at 0; an EOS ends a continuation early), running
// several sequences per forward step, and a tap sink records for every position j of the sequence:
//
//   hidden[j]  LAYER_OUT of the target's last layer (the pre-norm feature h^L_j)       [dim]
//   logits[j]  the target's output at j: its distribution of the token at j + 1       [n_vocab]
//
// Every token in `tokens` was run through the target, so hidden and logits have one row per token. Lines whose
// index is 9 mod 10 are held out (their samples go to held_out) for the accuracy figures.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/loader/model_loader.h"
#include "core/result.h"

namespace troupe::train {

struct distill_sample {
    std::vector<int32_t> tokens;  // [n] t_0 .. t_{n-1}
    int32_t n_prompt = 0;         // tokens of the opening (from the text); the rest are the target's
    std::vector<float> hidden;    // [n, dim]
    std::vector<float> logits;    // [n, n_vocab]
    int32_t size() const { return static_cast<int32_t>(tokens.size()); }
};

struct distill_dataset {
    int32_t dim = 0;
    int32_t n_vocab = 0;
    std::vector<distill_sample> train;
    std::vector<distill_sample> held_out;
    int64_t n_train_positions() const;
};

struct data_params {
    std::string text_path;
    int32_t open_tokens = 8;   // the shortest opening
    int32_t open_stride = 48;  // further openings of a line every this many tokens
    int32_t gen_tokens = 64;   // continuation length
    float temperature = 1.0f;  // 0: greedy
    uint64_t seed = 1;
    int32_t max_openings = 0;    // 0: all; else the first this many (held-out ones counted apart, a tenth of it)
    int32_t parallel = 16;       // sequences per forward step
    bool share_prefixes = true;  // a shorter opening of a line reads a longer one's prefill (distill_data.cpp)
    // Bytes the data set may take (hidden and logits rows: positions x (dim + n_vocab) floats, ~29 GB for a
    // 32k-token vocabulary at the EAGLE defaults); 0: 80% of the memory available when it starts (/proc/meminfo).
    // A larger estimate is refused before any work.
    uint64_t memory_budget = 0;
};

// The openings of the text, train and held out, as token lists.
struct openings {
    std::vector<std::vector<int32_t>> train, held_out;
};
result<openings> read_openings(const tokenizer& tok, const data_params& p);

// How the target runs for distillation: on the CPU with the default activation recipe and no quant plugin, the
// attention plugin gqa, `parallel` sequences at a time. The default recipe (8-bit activation blocks before
// quantized weights) is what the target runs with when it is drafted for, so the features and logits are the ones
// the drafter will see; on the grown 110M Q8_0 it also makes the data 2x faster than float activations (64
// openings: 29 s against 62 s).
engine_config target_config(const std::string& path, int32_t threads, int32_t parallel);

// Called after each group of `parallel` continuations: openings done (training and held-out together) of all.
using data_progress = std::function<void(size_t done, size_t total)>;

// Runs the target (a CPU model: its taps are attached for the run and detached after).
result<distill_dataset> make_dataset(loaded_model& target, const data_params& p, const data_progress& progress = {});

}  // namespace troupe::train
