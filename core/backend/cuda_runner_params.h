// cuda_runner_params: how make_cuda_runner() sets up the GPU (device, lanes, KV cache, weight types).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model/ops.h"
#include "core/model/tap_sink.h"

namespace troupe {

enum class cuda_weight_type { f16, f32 };  // what quantized GGUF weights become on the device

struct cuda_runner_params {
    std::string backend_dir;          // folder of libtroupe_cuda.so; empty: $TROUPE_BACKEND_DIR, else the build's
    int32_t device = 0;               // CUDA device index
    int32_t n_lanes = 2;              // streams: 0 = executor compute, 1 = KV block copies
    int32_t block_size = 16;          // KV tokens per block
    int32_t n_blocks = 0;             // 0: min(max_kv_tokens, kv_memory_fraction of free memory) / block_size
    int64_t max_kv_tokens = 0;        // 0: 32 full contexts
    float kv_memory_fraction = 0.5f;  // of the device memory free after the weights
    bool kv_f16 = false;              // F16 KV pools (half the memory); default F32, as the CPU runner
    // Q8_0 / Q4_0 / Q4_K / Q6_K weights are dequantized on the host before upload in this first cut:
    // to F16 (products in F16 with F32 accumulation) or F32 (exact, twice the memory).
    cuda_weight_type dequantize_to = cuda_weight_type::f16;
    // Quant plugins loaded for cuda (core/loader/cuda_plugins.h), in plugins.quant's order: a matrix of a type the
    // backend does not take goes to the first that claims it; its products run in the plugin's CUDA kernel on the
    // compute lane (backend ABI revision 6).
    std::vector<std::shared_ptr<quant_op>> quant;
    // Observers of the graph's taps (core/model/tap_sink.h): called from the CUDA graph with host copies, or device
    // rows where a sink asks (tap_sink::device_data).
    std::vector<std::shared_ptr<tap_sink>> taps;
};

}  // namespace troupe
