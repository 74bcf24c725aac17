// jacobi_window: the lookahead branch of lookahead decoding (Fu et al. 2024), as nodes of a proposal tree.
//
// The window keeps N-1 levels of guesses for the tokens after the context's last one (the root r). Level 0 is a
// chain of W-1 guesses at depths 1..W-1; level l >= 1 holds W guesses, its column i at depth i + l. Column i is the
// trajectory key_i, L1[i], ..., L_{N-2}[i] with key_0 = r and key_i = L0[i-1]: each token of a column was the
// target's argmax after the one before it, one Jacobi iteration apart. In the target's pass a column attends to the
// level-0 chain before it and to its own earlier levels: the paper's lookahead mask, which is exactly tree attention
// with these parents (W = 4, N = 4):
//
//   depth:   1       2        3        4         5
//   r ─┬─ L0[0] ── L0[1] ── L0[2]                       level 0: a chain
//      │    │        │        └─ L1[3] ── L2[3]            column 3
//      │    │        └─ L1[2] ── L2[2]                     column 2
//      │    └─ L1[1] ── L2[1]                              column 1
//      └─ L1[0] ── L2[0]                                   column 0 (hangs from the root)
//
// The argmax o_i after the last level's node of column i (read from the LOGITS tap) completes the n-gram
// (key_i, L1[i], ..., L_{N-2}[i], o_i), which goes to the pool; then every level moves down one (the window slides
// one position as the sequence advances): L0 <- L1 without its first token, L_l <- L_{l+1}, L_{N-2} <- o.
// Before the N-1 levels exist (warm-up) the window starts as one level-0 chain of W+N-3 tokens drawn from the prompt,
// and each step adds the next level from the outputs instead (every level losing its first token), as the paper's
// reference implementation does; n-grams are collected from the first full window on.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace troupe::spec_plugins {

class jacobi_window {
public:
    // width W >= 1, n N >= 3.
    jacobi_window(int32_t width, int32_t n) : w_(width), n_(n) {}

    // The most nodes the window has at any step (warm-up included).
    static int32_t max_nodes(int32_t width, int32_t n);

    // Level 0 from tokens drawn from `source` (the prompt; token 0 when it is empty) with the xorshift state `rng`.
    void seed(std::span<const int32_t> source, uint64_t& rng);

    bool seeded() const { return !levels_.empty(); }
    // Nodes of the window at this step.
    int32_t n_nodes() const;
    // Writes the window as nodes [first, first + n_nodes()) of a proposal (tokens and parents are the proposal's
    // arrays, indexed from 0) and remembers which node closes each column (output_nodes()).
    void lay_out(int32_t first, int32_t* tokens, int32_t* parents);
    // [n_columns] the node after which the target's argmax is the column's next token (set by lay_out).
    const std::vector<int32_t>& output_nodes() const { return out_nodes_; }

    // One Jacobi step from the outputs (outputs[i] follows output_nodes()[i]); key0 is the root the window was laid
    // out under. In the steady state each completed n-gram goes to collect(key, continuation of N-1 tokens).
    template <class F>
    void advance(int32_t key0, std::span<const int32_t> outputs, F&& collect) {
        if (levels_.size() == static_cast<size_t>(n_ - 1)) {
            const size_t top = levels_.size() - 1;
            std::vector<int32_t>& continuation = scratch_;
            continuation.resize(top + 1);
            for (size_t i = 0; i < outputs.size(); ++i) {
                const int32_t key = i == 0 ? key0 : levels_[0][i - 1];
                for (size_t l = 1; l <= top; ++l) continuation[l - 1] = levels_[l][i];
                continuation[top] = outputs[i];
                collect(key, continuation.data());
            }
        }
        slide(outputs);
    }

private:
    void slide(std::span<const int32_t> outputs);

    int32_t w_;
    int32_t n_;
    std::vector<std::vector<int32_t>> levels_;  // [n_levels][tokens]: level 0 W+N-3-f long, the others one longer
    std::vector<int32_t> out_nodes_;            // [n_columns]
    std::vector<int32_t> scratch_;              // [N-1] one continuation
};

}  // namespace troupe::spec_plugins
