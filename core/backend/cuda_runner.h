// cuda_runner: the model_runner that runs a whole Llama step on an NVIDIA GPU through the CUDA backend
// shared object (cuda_library.h). The executor drives it exactly like the CPU runner.
//
// make_cuda_runner() fails, as a value, wherever no GPU can run the model: backend not built, no
// driver, no device, out of memory, an unsupported weight type. The caller then logs ONE line
// (log_cuda_fallback) and uses the CPU runner. It checks for the driver before loading the backend,
// so a GPU-less machine never loads cudart or cuBLASLt.
//
// Swap preemption: swap_out copies the ceil(n_tokens / block_size) first blocks of a sequence (every
// layer's K and V) into a host buffer kept per sequence id; swap_in writes that copy into the blocks it
// is given (any ids, as many or more) and drops it; forget drops it unread. The copies run on the KV
// copy lane and are complete when the call returns. Swaps are called on the KV allocator's lane and forget on the
// executor's: the host copies are guarded by a mutex.
//
// Lanes (backend ABI revision 5): lane_stream(compute) is lane 0 and lane_stream(kv_copy) lane 1, as device
// streams the engine gives the executor's and the KV allocator's lanes. After order_steps(fences) the backend stops
// ordering its lanes itself; forward() hands the fences each step's end (an event after its KV writes) before it
// waits for the logits, and the actors order copies and steps with events (actors/kv_allocator/kv_copy_lane.h).
// keep_tree_path, the executor's own copy of rows, then runs on the compute lane, in order with the steps. Host buffers
// are ordinary pageable memory, not pinned: swaps are rare (a preemption), pinning gigabytes is slow to set up and
// takes memory from the rest of the machine, and the call waits for the copy either way. Pinned buffers (through two
// more ABI ops, cudaHostAlloc / cudaFreeHost) would skip the driver's staging copy if swaps ever show up in step times.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/backend/cuda_batch.h"
#include "core/backend/cuda_library.h"
#include "core/backend/cuda_runner_params.h"
#include "core/backend/cuda_upload.h"
#include "core/backend/llama_weights_view.h"
#include "core/model/model_runner.h"
#include "core/result.h"
#include "core/runtime/step_fences.h"

namespace troupe {

struct cuda_device {
    int32_t index = 0;
    std::string name;  // "NVIDIA H200"
    uint64_t total_bytes = 0;
    uint64_t free_bytes = 0;
    int32_t cc_major = 0;  // compute capability
    int32_t cc_minor = 0;
    int32_t n_sms = 0;
};

// The GPUs the backend sees, or why there are none (loads the backend only where a driver is present).
result<std::vector<cuda_device>> cuda_devices(const std::string& backend_dir = {});

class cuda_runner final : public model_runner {
public:
    static result<std::unique_ptr<cuda_runner>> create(const llama_weights_view& weights,
                                                       const cuda_runner_params& params);
    ~cuda_runner() override;
    cuda_runner(const cuda_runner&) = delete;
    cuda_runner& operator=(const cuda_runner&) = delete;

    std::string description() const override;
    int32_t n_vocab() const override { return n_vocab_; }
    int32_t n_ctx() const override { return n_ctx_; }
    kv_geometry kv() const override { return kv_; }
    size_t kv_bytes_per_token() const override { return kv_bytes_per_token_; }
    status forward(const forward_batch& batch, forward_output& out) override;
    // Trees of drafts where the backend has ABI revision 3 (tree attention, model_copy_rows); keep_tree_path copies
    // the accepted path's rows on the KV copy lane, ordered like copy_blocks.
    bool supports_trees() const override;
    status keep_tree_path(const sequence_step& step, std::span<const int32_t> path) override;

    // True where the loaded backend can copy KV blocks to the host (revision 2 of its ABI); an older
    // backend says false, so the scheduler recomputes instead of losing sequences to failed swaps.
    bool separate_kv_memory() const override { return can_swap_; }
    status swap_out(int64_t seq_id, std::span<const int32_t> blocks, int32_t n_tokens) override;
    status swap_in(int64_t seq_id, std::span<const int32_t> blocks, int32_t n_tokens) override;
    void forget(int64_t seq_id) override;
    // Bytes of swapped-out KV rows held in host memory, over all sequences.
    uint64_t host_kv_bytes() const {
        std::lock_guard lock(swap_mutex_);
        return host_kv_bytes_;
    }

    // Copies whole KV blocks src[i] -> dst[i] in every layer on the KV copy lane (lane 1 where there is
    // one), ordered after the steps issued before it and before the steps issued after it.
    status copy_blocks(std::span<const int32_t> src, std::span<const int32_t> dst) override;
    std::shared_ptr<device_stream> lane_stream(lane_role role) override;
    void order_steps(std::shared_ptr<step_fences> fences) override;
    // The KV rows of `blocks` in every layer, laid out as swap_out keeps them (cuda_backend_abi.h), read once every
    // lane is idle: for tests that compare caches byte for byte.
    result<std::vector<std::byte>> kv_bytes(std::span<const int32_t> blocks) const;
    const cuda_device& device() const { return device_; }
    // The cudaStream_t of a lane (0: this runner's compute, 1: its KV copies), for actors pinned to it.
    void* lane_stream(int32_t lane) const;
    uint64_t weight_bytes() const { return weight_bytes_; }
    // The device's copy bandwidth now (read + write GB/s of `bytes` copied `reps` times on the compute lane): the
    // limit a weight-streaming decode is measured against. An error where the library predates it (revision 9).
    result<double> measure_copy_gb_per_s(uint64_t bytes, int32_t reps) const;
    // What one token's decode step reads of them: all but the experts its layers do not route it to (each MoE layer
    // reads the router and n_used of its n_experts); weight_bytes() for a dense model.
    uint64_t decode_weight_bytes() const { return weight_bytes_ - unrouted_expert_bytes_; }

private:
    // A swapped-out sequence: its blocks as model_read_blocks lays them out (cuda_backend_abi.h).
    struct host_kv {
        int32_t n_tokens = 0;
        int32_t n_blocks = 0;
        std::unique_ptr<std::byte[]> bytes;  // [2 * n_layers][n_blocks][block_bytes]
        size_t n_bytes = 0;
    };

    cuda_runner() = default;
    // The backend's tap callback (cuda_backend_abi.h revision 6): each sink that wants the tap observes it.
    static const char* on_tap(void* ctx, const troupe_cuda_tap* tap);
    int32_t kv_lane() const { return n_lanes_ > 1 ? 1 : 0; }
    // The lane keep_tree_path copies on: the compute lane once the host orders the lanes (order_steps).
    int32_t tree_lane() const { return fences_ ? 0 : kv_lane(); }
    void drop_host_copy(std::unordered_map<int64_t, host_kv>::iterator it);

    std::shared_ptr<const cuda_library> lib_;
    troupe_cuda_context* ctx_ = nullptr;
    troupe_cuda_model* model_ = nullptr;
    cuda_device device_;
    std::string name_;
    std::string architecture_;  // general.architecture, for description()
    std::string weight_types_;  // "F32", "Q4_0 (dequantized to F16)"
    int32_t n_layers_ = 0, dim_ = 0, n_heads_ = 0, n_kv_heads_ = 0, n_vocab_ = 0, n_ctx_ = 0, n_lanes_ = 0;
    kv_geometry kv_{0, 0};
    size_t kv_bytes_per_token_ = 0;
    uint64_t weight_bytes_ = 0;
    uint64_t unrouted_expert_bytes_ = 0;  // per token: the (n_experts - n_used) / n_experts share of the experts
    cuda_flat_batch flat_;                // the step's index arrays, memory reused across steps
    bool can_swap_ = false;
    size_t host_block_bytes_ = 0;                   // one block of every layer's K and V pools
    mutable std::mutex swap_mutex_;                 // guards swapped_ and host_kv_bytes_
    std::unordered_map<int64_t, host_kv> swapped_;  // by sequence id
    uint64_t host_kv_bytes_ = 0;                    // sum of swapped_[*].n_bytes
    std::shared_ptr<device_stream> streams_[2];     // [compute, kv_copy] made on first ask
    std::shared_ptr<step_fences> fences_;           // set by order_steps
    std::vector<std::unique_ptr<cuda_external_weight>>
        externals_;  // matrices quant plugins took (the model calls them)
    std::vector<std::shared_ptr<tap_sink>> taps_;
    std::vector<int64_t> token_seq_ids_;  // [n_tokens] of the step in flight: each token's sequence id, for taps
    std::vector<int64_t> tap_seq_ids_;    // [n_rows] of the tap being reported
    std::vector<int32_t> tap_positions_;  // [n_rows]
    std::string tap_error_;
};

// The factory the executor's setup calls for `--device cuda`.
result<std::unique_ptr<model_runner>> make_cuda_runner(const llama_weights_view& weights,
                                                       const cuda_runner_params& params);

// The one log line of a CUDA request that falls back: "cuda: no GPU found (<why>); falling back to the CPU".
void log_cuda_fallback(const std::string& why);

// `--device cuda` in one call: the CUDA runner, or, where none can be made because no GPU is there,
// log_cuda_fallback() and whatever make_cpu_runner returns (called only then); with a GPU there, the reason it could
// not run the model is the error. Where a GPU is present (cuda_devices), check_on_gpu (if
// set) first says whether the run can go on it (the plugins it needs there, core/loader/cuda_plugins.h); its error
// is the result, before any upload: falling back would hide what was asked for.
using cpu_runner_factory = std::function<result<std::unique_ptr<model_runner>>()>;
result<std::unique_ptr<model_runner>> make_cuda_runner_or_cpu(const llama_weights_view& weights,
                                                              const cuda_runner_params& params,
                                                              const cpu_runner_factory& make_cpu_runner,
                                                              const std::function<status()>& check_on_gpu = {});

}  // namespace troupe
