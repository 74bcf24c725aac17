// model_runner: what the executor actor drives. One forward() runs one step for a batch of sequences,
// each bringing some new tokens (a prefill chunk, one decode token, or a token plus draft tokens to
// verify) at its own positions, and returns logits. KV memory is addressed by block tables handed out
// by the KV allocator (see core/model/ops.h for the layout); the runner owns the memory.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/runtime/device_stream.h"

namespace troupe {

class step_fences;

struct sequence_step {
    int64_t seq_id;
    std::vector<int32_t> tokens;       // new tokens this step
    int32_t pos0;                      // position of tokens[0]; earlier positions are in the cache
    std::vector<int32_t> block_table;  // KV blocks of the sequence, covering positions [0, pos0 + tokens.size())
    bool all_logits = false;           // logits for every new token (draft verification), else the last only
    // Speculative verification: the last n_draft tokens are draft tokens (proposal nodes 0..n_draft-1, spec.h).
    // tree_parents empty: they are a chain and run causally like the others. Else [n_draft]: node i follows node
    // tree_parents[i] (< i), or with -1 the last token before the drafts; node i then runs at RoPE position
    // pos0 + n_before + depth(i) (roots: depth 0), writes KV row pos0 + n_before + i, and attends to the rows
    // before the drafts, its ancestors and itself (n_before = tokens.size() - n_draft). Only for runners with
    // supports_trees().
    int32_t n_draft = 0;
    std::vector<int32_t> tree_parents = {};
    // The tables of KV groups 1.. when the runner has several (kv_group_windows()): each covers the same positions;
    // a windowed group's entries before the window of pos0 may be -1 (released). block_table is group 0's.
    std::vector<std::vector<int32_t>> more_tables = {};
};

struct forward_batch {
    std::vector<sequence_step> seqs;
    int64_t step_id = -1;  // the plan's id, for order_steps(); -1: a step outside the engine's plans
};

struct forward_output {
    int32_t n_vocab = 0;
    std::vector<float> logits;       // [n_rows, n_vocab]
    std::vector<int32_t> row_begin;  // per sequence: its first row in logits; rows are in sequence order
    std::vector<int32_t> n_rows;     // per sequence: 1, or tokens.size() with all_logits
    std::span<const float> row(size_t seq, int32_t i = 0) const {
        return {logits.data() + static_cast<size_t>(row_begin[seq] + i) * n_vocab, static_cast<size_t>(n_vocab)};
    }
};

struct kv_geometry {
    int32_t block_size;  // tokens per block
    int32_t n_blocks;    // blocks in the pool
};

enum class lane_role {
    compute,  // the executor's lane: forward(), keep_tree_path()
    kv_copy,  // the KV allocator's lane: copy_blocks(), swap_out(), swap_in()
};

class model_runner {
public:
    virtual ~model_runner() = default;
    virtual std::string description() const = 0;  // "stories260K.gguf: llama, 5 layers, dim 64, F32 on cpu"
    virtual int32_t n_vocab() const = 0;
    virtual int32_t n_ctx() const = 0;  // the model's training context
    virtual kv_geometry kv() const = 0;
    virtual size_t kv_bytes_per_token() const = 0;
    // KV groups: the sliding window of each group of layers whose block table is its own (0: every position), group
    // 0's first. One {0}: one table for every layer (sequence_step::block_table only). A windowed group's blocks go
    // back to the pool as the sequence advances (actors/kv_allocator/kv_group_pool.h).
    virtual std::vector<int32_t> kv_group_windows() const { return {0}; }
    // Runs one step. Errors (bad positions, a plugin failure) fail the step, not the process.
    virtual status forward(const forward_batch& batch, forward_output& out) = 0;

    // Swap preemption, for runners whose KV memory is separate from host memory (a GPU): copy the
    // first n_tokens rows of a sequence's blocks (in position order) to host memory, and back into
    // other blocks later. The CPU runner has no separate memory: the scheduler recomputes instead.
    virtual bool separate_kv_memory() const { return false; }
    virtual status swap_out(int64_t seq_id, std::span<const int32_t> blocks, int32_t n_tokens) {
        (void)blocks;
        (void)n_tokens;
        return make_error("swap_out of sequence " + std::to_string(seq_id) + ": this runner has no separate KV memory");
    }
    virtual status swap_in(int64_t seq_id, std::span<const int32_t> blocks, int32_t n_tokens) {
        (void)blocks;
        (void)n_tokens;
        return make_error("swap_in of sequence " + std::to_string(seq_id) + ": this runner has no separate KV memory");
    }
    // The sequence ended: drop anything kept for it (a swapped-out copy that was never swapped in). Called on the
    // executor's lane while the copy lane may swap: a runner that keeps copies guards them.
    virtual void forget(int64_t seq_id) { (void)seq_id; }
    // Copies whole KV blocks src[i] -> dst[i] in every layer (copy-on-write, a fork's private last block), enqueued
    // on the copy stream where there is one.
    virtual status copy_blocks(std::span<const int32_t> src, std::span<const int32_t> dst) {
        (void)dst;
        return make_error("copy of " + std::to_string(src.size()) + " KV blocks: this runner cannot copy blocks");
    }

    // The device stream of a lane in `role` (device_stream.h), made by the runner; null where it has none (the
    // CPU). Asked once, when the engine pins its actors to lanes.
    virtual std::shared_ptr<device_stream> lane_stream(lane_role role) {
        (void)role;
        return nullptr;
    }
    // From now on: forward() publishes step batch.step_id to `fences` with the event that ends its KV writes once
    // that work is enqueued (before it waits for the logits), and the runner's streams no longer wait for each
    // other on their own. A runner without streams ignores it (the executor publishes its steps when they return).
    virtual void order_steps(std::shared_ptr<step_fences> fences) { (void)fences; }

    // Whether forward() takes sequence_step::tree_parents (its attention takes tree masks); else the executor
    // verifies chains only.
    virtual bool supports_trees() const { return false; }
    // After a tree step: moves the KV rows of the accepted nodes `path` (root to leaf, each the child of the one
    // before) to rows first, first + 1, ... where first = pos0 + n_before of `step`, in every layer, so the
    // sequence's cache is contiguous again. A path of nodes 0, 1, ..., k-1 is already in place.
    virtual status keep_tree_path(const sequence_step& step, std::span<const int32_t> path) {
        for (size_t i = 0; i < path.size(); ++i) {
            if (path[i] != static_cast<int32_t>(i)) {
                return make_error("keep_tree_path: this runner does not verify trees");
            }
        }
        (void)step;
        return {};
    }
};

}  // namespace troupe
