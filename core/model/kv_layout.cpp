#include "core/model/kv_layout.h"

#include <algorithm>
#include <climits>
#include <cstdio>

namespace troupe {
namespace {

// "1.5 MiB", or "24.0 KiB" below a MiB.
std::string mib(uint64_t bytes) {
    char s[32];
    if (bytes < (1 << 20)) {
        std::snprintf(s, sizeof s, "%.1f KiB", static_cast<double>(bytes) / (1 << 10));
    } else {
        std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    }
    return s;
}

}  // namespace

kv_layout builtin_kv_layout(int32_t kv_width, kv_dtype type) {
    kv_layout l;
    l.name = type == kv_dtype::f16 ? "f16" : "f32";
    l.bytes_per_token = 2 * static_cast<size_t>(kv_width) * kv_element_bytes(type);
    return l;
}

int64_t kv_blocks_per_sequence(int32_t n_tokens, int32_t block_size, const std::vector<int32_t>& group_windows) {
    const int64_t full = (n_tokens + block_size - 1) / block_size;
    if (group_windows.empty()) return full;
    int64_t n = 0;
    for (const int32_t w : group_windows) {
        n += w == 0 ? full : std::min<int64_t>(full, (w + block_size - 1) / block_size + 1);
    }
    return n;
}

result<kv_sizing> size_kv_cache(const kv_layout& layout, const kv_sizing_inputs& in, bool require_full_context) {
    TROUPE_ASSERT(in.n_layers > 0 && in.block_size > 0 && in.n_ctx > 0 && in.max_seqs > 0,
                  "size_kv_cache needs positive n_layers, block_size, n_ctx and max_seqs");
    kv_sizing s;
    s.block_bytes = layout.block_bytes(in.block_size);
    s.window_bytes =
        static_cast<uint64_t>(in.n_layers) * static_cast<uint64_t>(in.max_seqs) * layout.window_slot_bytes();
    const int32_t layers_per_block = in.layers_per_block > 0 ? in.layers_per_block : in.n_layers;
    const uint64_t per_block = static_cast<uint64_t>(layers_per_block) * s.block_bytes;
    const int64_t blocks_per_seq = kv_blocks_per_sequence(in.n_ctx, in.block_size, in.group_windows);
    const bool grouped = in.group_windows.size() > 1 || (in.group_windows.size() == 1 && in.group_windows[0] > 0);
    s.blocks_per_seq = blocks_per_seq;
    s.seq_bytes = static_cast<uint64_t>(blocks_per_seq) * per_block;
    const int64_t cap = 4 * blocks_per_seq * in.max_seqs;
    const uint64_t for_blocks = in.budget > s.window_bytes ? in.budget - s.window_bytes : 0;
    const int64_t affordable = static_cast<int64_t>(for_blocks / per_block);
    s.bytes_per_token = static_cast<double>(per_block) / in.block_size;
    char per_token[96];
    std::snprintf(per_token, sizeof per_token, "%s, %.1f B/token/layer", layout.name.c_str(),
                  layout.bytes_per_token_in_blocks(in.block_size));
    if (affordable < 1 || (require_full_context && affordable < blocks_per_seq)) {
        return make_error(
            "kv.memory " + mib(in.budget) + " holds " + std::to_string(affordable) + " blocks of " +
            std::to_string(in.block_size) + " tokens (" + per_token + " x " + std::to_string(layers_per_block) +
            " layers = " + std::to_string(per_block) + " bytes a block" +
            (s.window_bytes > 0
                 ? ", after " + mib(s.window_bytes) + " of windows for " + std::to_string(in.max_seqs) + " sequences"
                 : std::string()) +
            "), less than one full context of " + std::to_string(in.n_ctx) + " tokens (" +
            std::to_string(blocks_per_seq) + " blocks" + (grouped ? " with the windowed layers' blocks released" : "") +
            "): raise kv.memory to at least " +
            mib(s.window_bytes + static_cast<uint64_t>(blocks_per_seq) * per_block));
    }
    s.n_blocks = static_cast<int32_t>(std::min<int64_t>({affordable, cap, INT32_MAX}));
    s.pool_bytes = static_cast<uint64_t>(s.n_blocks) * per_block;
    s.tokens = static_cast<int64_t>(s.n_blocks) * in.block_size;
    s.full_contexts = s.n_blocks / blocks_per_seq;
    s.summary =
        "KV pool (" + std::string(per_token) + "): " + std::to_string(s.n_blocks) + " blocks of " +
        std::to_string(in.block_size) + " tokens (" + mib(s.pool_bytes) + ", " + std::to_string(s.tokens) +
        (grouped ? " block rows; " : " tokens; ") + std::to_string(s.full_contexts) + " full contexts of " +
        std::to_string(in.n_ctx) + ", " + mib(s.seq_bytes) + " each" +
        (grouped
             ? ": " + std::to_string(in.group_windows.size()) + " KV groups, windowed layers' blocks released" + ", " +
                   std::to_string(layers_per_block) + " of " + std::to_string(in.n_layers) + " layers per block"
             : std::string()) +
        ")" +
        (s.window_bytes > 0
             ? " + " + mib(s.window_bytes) + " of windows for " + std::to_string(in.max_seqs) + " sequences"
             : std::string());
    return s;
}

}  // namespace troupe
