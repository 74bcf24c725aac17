// engine_config: the typed form of troupe's one YAML config file (config/default.yaml documents every key).
//
// Read once at start: defaults (the member initializers here, which equal config/default.yaml), then the
// file, then TROUPE_MODEL from the environment, then command-line flags and --set key=value overrides.
// Loading and validation live in config_loader.h; this header is plain data plus names and formatting.
#pragma once

#include <yaml-cpp/node/impl.h>  // YAML::Node with its inline members
#include <yaml-cpp/node/node.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/log/log.h"
#include "core/result.h"
#include "core/sampling/sampler.h"

namespace troupe {

enum class device_kind { cpu, cuda };

std::string_view device_name(device_kind d);
std::optional<device_kind> parse_device(std::string_view name);
// log_level names accepted in the config: debug, info, warn, error.
std::optional<log_level> parse_log_level(std::string_view name);

// How much memory the KV cache may take: a size in bytes, or a fraction of the device's memory
// (system RAM for cpu, free GPU memory for cuda). Exactly one of the two is non-zero.
struct memory_budget {
    uint64_t bytes = 0;
    double fraction = 0.0;  // in (0, 1]

    uint64_t resolve(uint64_t device_bytes) const;
    bool operator==(const memory_budget&) const = default;
};

// "256MiB", "1.5GiB", "64KiB", "4096" (bytes; B, KiB, MiB, GiB, TiB and KB, MB, GB, TB suffixes), or a
// fraction "0.5" (a number with a point, in (0, 1]). Errors say what a valid value looks like.
result<memory_budget> parse_memory_budget(std::string_view text);
// Inverse of parse_memory_budget: "256MiB" where exact, else bytes; fractions as the shortest decimal.
std::string format_memory_budget(const memory_budget& m);

// scheduler.policy: continuous batching, or the static baseline (a batch runs to completion).
enum class schedule_policy { continuous, static_batch };
// scheduler.preemption: when KV blocks run out, recompute the preempted sequence's KV later, or swap
// its blocks to host memory (only where the device has separate memory; recompute otherwise).
enum class preemption_policy { recompute, swap };

std::string_view schedule_policy_name(schedule_policy p);
std::optional<schedule_policy> parse_schedule_policy(std::string_view name);
std::string_view preemption_policy_name(preemption_policy p);
std::optional<preemption_policy> parse_preemption_policy(std::string_view name);

struct scheduler_config {
    int32_t max_running_seqs = 64;      // sequences in one step (decode batch)
    int32_t max_batched_tokens = 2048;  // tokens in one step, prefill chunks and decodes together
    int32_t max_waiting = 1024;         // queued requests beyond which new ones are refused (overload)
    schedule_policy policy = schedule_policy::continuous;
    preemption_policy preemption = preemption_policy::recompute;
    bool adaptive_draft = true;  // with a spec plugin: draft only where it measurably pays (draft_controller)
    bool plan_ahead = true;      // plan step N+1 while step N runs, so the executor does not wait between steps
};

// kv.dtype: the element type of the KV cache.
enum class kv_cache_type {
    f32,  // "f32": float32 (the goldens' reference)
    f16,  // "f16": IEEE half: half the memory per token and half the bytes attention reads
};

std::string_view kv_cache_type_name(kv_cache_type t);
std::optional<kv_cache_type> parse_kv_cache_type(std::string_view name);

// kernels.activations: what the builtin CPU kernels do with the activations before they meet quantized or
// F16/BF16 weights (types no quant plugin takes). F32 weights are the same in both.
enum class kernel_activations {
    quantized,  // "quantized": 8-bit blocks (Q8_0 / Q8_K) or F16/BF16 rounding, llama.cpp's CPU path
    float32,    // "float": float32 activations, weights dequantized exactly
};

std::string_view kernel_activations_name(kernel_activations r);
std::optional<kernel_activations> parse_kernel_activations(std::string_view name);

// kernels.weights: where the weights the builtin CPU kernels stream live during inference.
enum class weight_memory {
    copy,  // "copy": copied (or repacked for a kernel's layout) into anonymous memory advised for huge pages
    mmap,  // "mmap": read in place from the file's mapped pages (no copy; shared page cache)
};

std::string_view weight_memory_name(weight_memory w);
std::optional<weight_memory> parse_weight_memory(std::string_view name);

struct kernels_config {
    kernel_activations activations = kernel_activations::quantized;
    weight_memory weights = weight_memory::copy;
};

// One plugin choice. params is the plugin's own sub-tree, passed through unvalidated (the plugin
// validates it at create); an empty node when absent.
//
// YAML::Node is a handle whose assignment writes through to the shared tree, so copies clone params:
// copying or assigning a config never changes another one.
struct plugin_config {
    std::string name;  // "none" turns quant and spec off
    std::string path;  // explicit library path; empty: libtroupe_<kind>_<name>.so in plugin_dir
    YAML::Node params;

    plugin_config() = default;
    explicit plugin_config(std::string plugin_name) : name(std::move(plugin_name)) {}
    plugin_config(const plugin_config& other);
    plugin_config& operator=(const plugin_config& other);

    bool enabled() const { return name != "none"; }
};

struct kv_config {
    int32_t block_size = 16;                       // tokens per KV block; a power of two
    kv_cache_type dtype = kv_cache_type::f32;      // element type of the cache
    memory_budget memory{uint64_t{1} << 30, 0.0};  // 1GiB
    bool prefix_caching = true;                    // share the blocks of identical prompt prefixes
    // A block table per group of layers with one sliding window (Gemma 2's alternate layers, Mistral v0.1's every
    // layer): blocks that leave a window go back to the pool as sequences advance. CPU, built-in cache, no drafter.
    bool window_release = true;
    // kv.plugin: a KV plugin (plugins/include/troupe/kv.h: int8, kivi, fp8) that owns the cache's format and its
    // attention, in place of the attention plugin's kv.dtype cache; "none": the built-in cache.
    plugin_config plugin{"none"};
};

struct plugins_config {
    plugin_config attention{"gqa"};
    // plugins.quant: one plugin, or a list tried in order: each weight goes to the first that claims its type.
    // quant is the first (what the single form and --set plugins.quant.* edit), more_quant the rest of the list.
    // Default [w4a16]: Q8_0 and the other GGUF types run on the builtin kernels (the int8 recipe), their fastest
    // path; quant/q8 (W8A16, online quantization) is opt-in.
    plugin_config quant{"w4a16"};
    std::vector<plugin_config> more_quant;
    plugin_config spec{"none"};
    std::string plugin_dir;  // "": $TROUPE_PLUGIN_DIR, else the build's plugin folder (the host decides)

    // Every quant plugin in order; empty when the first is "none".
    std::vector<plugin_config> quant_plugins() const;
};

// The HTTP / WebSocket front end (`troupe serve`).
struct server_config {
    std::string host = "127.0.0.1";          // address to bind; 127.0.0.1 keeps it local
    int32_t port = 8080;                     // 0: an ephemeral port (tests)
    std::string admin_token;                 // required for /admin; empty: disabled (troupe serve generates one)
    bool admin_console = true;               // troupe serve: false keeps /admin disabled (no generated token)
    int64_t max_body_bytes = 1 << 20;        // larger request bodies are answered 413
    int32_t drain_timeout_ms = 10000;        // on SIGTERM / drain: running requests get this long to finish
    int32_t max_prompt_tokens = 0;           // 0: the model's context less one; longer prompts are answered 422
    int32_t max_queue_requests = 256;        // requests waiting for their first token beyond which 429
    int64_t max_queue_tokens = 262144;       // their prompt tokens together beyond which 429
    int64_t max_send_queue_bytes = 4 << 20;  // per connection: unsent output beyond it cancels and closes
    std::string served_model_name;           // the `model` name in the API; empty: the GGUF file's stem
    // Security (README "Security"): the API key /v1, /tokenize, /detokenize, /ws and /metrics require
    // (Authorization: Bearer <key>); empty: none, and then only a loopback host may be bound.
    std::string api_key;
    bool allow_insecure = false;               // true: a non-loopback host starts without api_key (a warning)
    std::vector<std::string> allowed_hosts;    // Host names accepted besides localhost and IP addresses; "*": any
    std::vector<std::string> allowed_origins;  // Origins /ws accepts besides the page's own; "*": any
    std::vector<std::string> cors_origins;     // Origins the API answers with CORS headers; "*": any
};

struct engine_config {
    std::string model;  // GGUF path; $TROUPE_MODEL overrides the file, flags override both
    device_kind device = device_kind::cpu;
    int32_t threads = 0;  // 0: all cores
    troupe::log_level log_level = troupe::log_level::info;
    sampling_params sampling;  // per-request defaults; requests override them
    scheduler_config scheduler;
    kv_config kv;
    kernels_config kernels;
    plugins_config plugins;
    // `troupe quantize`'s method: a quant plugin with an offline quantization table (--method sets the name) and
    // its params (--set quantize.params.KEY=VALUE).
    plugin_config quantize{"rtn"};
    server_config server;
};

// The effective config as YAML, every key, in the order of config/default.yaml. Parsing it back gives
// the same config.
std::string to_yaml(const engine_config& config);
// A plugin's params as YAML text ("{}" when empty), for the plugin ABI.
std::string params_yaml(const plugin_config& plugin);

}  // namespace troupe
