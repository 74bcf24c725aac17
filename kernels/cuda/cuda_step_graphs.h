// Decode-sized steps replayed as CUDA graphs. A decode step of a 1B model is ~450 small launches (norms, RoPE,
// attention, cuBLASLt products); launched one by one from the host they take several times the step's memory time,
// so the step is bound by launches, not by the GPU. A graph of the whole embed-and-layers part is launched in one
// call instead. The graph bakes in the step's launch shapes and buffer pointers, never its indices: tokens,
// positions and block tables are read from the uploaded index buffer, so one graph serves every step of its shape.
//
// Per shape (tokens, sequences, logits rows, tree mask words, which attention kernel): the first step runs eagerly (it
// creates the cuBLASLt plans and grows the buffers, which a capture may not do), the second is captured and every later
// one replays it. A graph whose buffers moved (a larger batch grew them) is dropped and captured again. A capture that
// fails (a plugin's kernel that synchronizes, say) leaves that shape eager. TROUPE_CUDA_GRAPHS=0 turns graphs off.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <set>

namespace troupe::cuda {

struct step_shape {
    int32_t n_tokens = 0;
    int32_t n_seqs = 0;
    int32_t n_out_rows = 0;
    int32_t mask_words = -1;  // -1: not a tree step
    bool tiled_attention = false;
    auto operator<=>(const step_shape&) const = default;
};

// The device buffers a step's launches point into (scratch, indices, rounded activations, plugin output, cuBLASLt
// workspace): a graph is valid while they stay where they were when it was captured.
using step_buffers = std::array<const void*, 5>;

class step_graphs {
public:
    static constexpr int32_t max_tokens = 128;  // decode batches and speculation's verify steps; prefill runs eagerly
    static constexpr size_t max_graphs = 64;

    step_graphs();  // enabled unless TROUPE_CUDA_GRAPHS=0
    ~step_graphs();
    step_graphs(const step_graphs&) = delete;
    step_graphs& operator=(const step_graphs&) = delete;

    bool enabled() const { return enabled_; }
    // Runs `enqueue` (which enqueues the step on `stream` and returns null or a message) eagerly, or captured into a
    // graph and launched, or replays the graph made for `shape` before.
    const char* run(const step_shape& shape, const step_buffers& buffers, cudaStream_t stream,
                    const std::function<const char*()>& enqueue);
    size_t n_graphs() const { return graphs_.size(); }

private:
    void clear();
    bool enabled_ = true;
    std::map<step_shape, cudaGraphExec_t> graphs_;  // null: the capture failed, the shape runs eagerly
    std::set<step_shape> seen_;
    step_buffers buffers_{};
};

}  // namespace troupe::cuda
