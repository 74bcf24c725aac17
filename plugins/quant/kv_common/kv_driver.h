// The driver shared by troupe's quantized KV-cache plugins (kv/int8, kv/kivi, kv/fp8): the descriptor, create,
// layout and forward of kv.h over a format (kv_format.h). Include it from the plugin's one generic .cpp file only.
//
// The window of the newest blocks in float: kv_window.h.
//
// Forward: (1) writes, one work item per (sequence, kv head), tokens in position order; (2) the headers, serially;
// (3) attention, one work item per (tile of a sequence's tokens, kv head): an online softmax block by block (scores
// of the block's rows for the tile's query rows, a new running max and sum, then the weighted values), reading codes
// directly; each block row is decoded once per tile.
#pragma once

#include <troupe/kv.h>
#include <troupe/plugin.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kv_attend.h"
#include "kv_format.h"
#include "kv_window.h"
#include "plugins/common/plugin_support.h"

namespace troupe::kv {

// The kernels a plugin instance runs: the scalar twins, AVX2 (+FMA, F16C) or AVX-512 (F, BW, VL; VNNI where present).
enum class kernel_level { scalar, avx2, avx512 };

inline const char* level_name(kernel_level level) {
    return level == kernel_level::avx512 ? "avx512" : level == kernel_level::avx2 ? "avx2" : "scalar";
}

// A format chosen by the parameters, before the shape is known.
class format_choice {
public:
    virtual ~format_choice() = default;
    // Makes the format for `geometry` with the kernels of `level`: fills codec and layout (bytes_per_token,
    // bytes_per_block, and whether there is a window), or returns why the shape cannot be served.
    virtual std::string make(const kv_geometry& geometry, kernel_level level, block_codec& codec,
                             troupe_kv_layout& layout) = 0;
};

inline bool cpu_has_avx512() {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c");
}

inline bool cpu_has_avx2() {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

}  // namespace troupe::kv

struct troupe_plugin_instance {
    std::string source;  // "kv/int8"
    troupe::kv::kernel_level level = troupe::kv::kernel_level::scalar;
    std::unique_ptr<troupe::kv::format_choice> choice;
    bool has_layout = false;
    troupe::kv::kv_geometry geometry;
    troupe::kv::block_codec codec;
    size_t block_bytes = 0;  // the rounded size the host will use
    std::string error;
};

namespace troupe::kv {

using namespace troupe::plugin_support;

inline int32_t fail(troupe_plugin_instance* inst, int32_t code, std::string message) {
    inst->error = std::move(message);
    return code;
}

inline int32_t check_call(troupe_plugin_instance* inst, const troupe_kv_call& c) {
    const kv_geometry& g = inst->geometry;
    if (!inst->has_layout) return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "forward called before layout");
    if (c.n_tokens < 0 || c.n_heads <= 0 || c.n_kv_heads != g.n_kv_heads || c.head_dim != g.head_dim ||
        c.block_size != g.block_size) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                    "kv call has n_tokens " + std::to_string(c.n_tokens) + ", n_heads " + std::to_string(c.n_heads) +
                        ", n_kv_heads " + std::to_string(c.n_kv_heads) + ", head_dim " + std::to_string(c.head_dim) +
                        ", block_size " + std::to_string(c.block_size) + "; the layout was made for n_kv_heads " +
                        std::to_string(g.n_kv_heads) + ", head_dim " + std::to_string(g.head_dim) + ", block_size " +
                        std::to_string(g.block_size));
    }
    if (c.n_heads % c.n_kv_heads != 0 || c.n_heads / c.n_kv_heads > max_group) {
        return fail(inst, TROUPE_ERR_UNSUPPORTED,
                    "n_heads " + std::to_string(c.n_heads) + " must be a multiple of n_kv_heads " +
                        std::to_string(c.n_kv_heads) + " with at most " + std::to_string(max_group) +
                        " query heads per kv head");
    }
    if (c.block_bytes < inst->block_bytes) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                    "kv call has block_bytes " + std::to_string(c.block_bytes) + ", the layout needs " +
                        std::to_string(inst->block_bytes));
    }
    if (c.n_tokens == 0) return TROUPE_OK;
    if (!c.q || !c.k || !c.v || !c.out || !c.positions || !c.seq_of || !c.block_tables || !c.pool) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "kv call has a null pointer");
    }
    if (has_window(inst->codec) && (!c.window || !c.window_slot)) {
        return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "kv call has no window, which this layout declares");
    }
    for (int32_t t = 0; t < c.n_tokens; ++t) {
        const int32_t s = c.seq_of[t];
        if (s < 0 || s >= c.n_seqs || c.block_tables[s] == nullptr) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "token " + std::to_string(t) + " belongs to sequence " + std::to_string(s) + ", expected 0.." +
                            std::to_string(c.n_seqs - 1) + " with a block table");
        }
        if (c.positions[t] < 0) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "token " + std::to_string(t) + " has position " + std::to_string(c.positions[t]));
        }
        for (int32_t b = 0; b <= c.positions[t] / c.block_size; ++b) {
            if (c.block_tables[s][b] < 0) {
                return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                            "token " + std::to_string(t) + " at position " + std::to_string(c.positions[t]) +
                                " reads block " + std::to_string(c.block_tables[s][b]) + " (entry " +
                                std::to_string(b) + " of sequence " + std::to_string(s) + "'s table)");
            }
        }
        if (has_window(inst->codec) && c.window_slot[s] < 0) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "sequence " + std::to_string(s) + " has window slot " + std::to_string(c.window_slot[s]));
        }
    }
    return TROUPE_OK;
}

inline int32_t forward(troupe_plugin_instance* inst, const troupe_kv_call* call, const troupe_parallel* par) {
    inst->error.clear();
    return guarded(inst->error, [&]() -> int32_t {
        if (call == nullptr || call->struct_size < sizeof(troupe_kv_call)) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "kv call is null or older than this plugin's");
        }
        const troupe_kv_call& c = *call;
        if (const int32_t rc = check_call(inst, c); rc != TROUPE_OK) return rc;
        if (c.n_tokens == 0) return TROUPE_OK;
        const block_codec& codec = inst->codec;
        const int32_t bs = c.block_size;
        const int32_t hd = c.head_dim;
        const bool windowed = has_window(codec);

        // Each sequence's tokens in position order, and its last position.
        std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(c.n_seqs));
        for (int32_t t = 0; t < c.n_tokens; ++t) tokens[static_cast<size_t>(c.seq_of[t])].push_back(t);
        std::vector<int32_t> last_pos(static_cast<size_t>(c.n_seqs), -1);
        for (int32_t s = 0; s < c.n_seqs; ++s) {
            auto& ts = tokens[static_cast<size_t>(s)];
            std::stable_sort(ts.begin(), ts.end(),
                             [&c](int32_t a, int32_t b) { return c.positions[a] < c.positions[b]; });
            if (!ts.empty()) last_pos[static_cast<size_t>(s)] = c.positions[ts.back()];
        }

        // (1) writes, per (sequence, kv head).
        int32_t rc = run_parallel(par, static_cast<int64_t>(c.n_seqs) * c.n_kv_heads, [&](int64_t begin, int64_t end) {
            for (int64_t item = begin; item < end; ++item) {
                const int32_t s = static_cast<int32_t>(item / c.n_kv_heads);
                const int32_t h = static_cast<int32_t>(item % c.n_kv_heads);
                const auto& ts = tokens[static_cast<size_t>(s)];
                if (ts.empty()) continue;
                const int32_t n_res = codec.residual_blocks;
                window_view win;
                int32_t held[max_residual_blocks];  // this item's view of the ring (the header is updated in (2))
                if (windowed) {
                    win = window_of(inst->geometry, inst->codec, c.window, c.window_slot[s]);
                    std::copy(win.held, win.held + n_res, held);
                }
                for (const int32_t t : ts) {
                    const int32_t p = c.positions[t];
                    const int32_t b = p / bs;
                    const int32_t r = p % bs;
                    uint8_t* block =
                        static_cast<uint8_t*>(c.pool) + static_cast<size_t>(c.block_tables[s][b]) * c.block_bytes;
                    float* wk = nullptr;
                    float* wv = nullptr;
                    if (windowed) {
                        const size_t at = (static_cast<size_t>(b % n_res) * c.n_kv_heads + h) * bs * hd;
                        if (win.k) wk = win.k + at;
                        if (win.v) wv = win.v + at;
                        if (held[b % n_res] != b + 1) {
                            if (r > 0) codec.reload(codec.format, block, wk, wv, h, r);
                            held[b % n_res] = b + 1;
                        }
                    }
                    const size_t row = (static_cast<size_t>(t) * c.n_kv_heads + h) * hd;
                    codec.write(codec.format, block, wk, wv, h, r, c.k + row, c.v + row);
                    if (windowed && r == bs - 1) codec.close(codec.format, block, wk, wv, h);
                }
            }
        });
        if (rc != TROUPE_OK) return fail(inst, rc, "writing K/V failed in the host's parallel_for");

        // (2) headers: the block each ring entry now holds.
        if (windowed) {
            for (int32_t s = 0; s < c.n_seqs; ++s) {
                if (tokens[static_cast<size_t>(s)].empty()) continue;
                int32_t* held = window_of(inst->geometry, inst->codec, c.window, c.window_slot[s]).held;
                for (const int32_t t : tokens[static_cast<size_t>(s)]) {
                    const int32_t b = c.positions[t] / bs;
                    held[b % codec.residual_blocks] = b + 1;
                }
            }
        }

        // (3) attention, per (tile, kv head): tiles of one sequence's tokens in position order, costliest first
        // (a tile's cost grows with its last position).
        const int32_t per_tile = std::max(1, max_group / (c.n_heads / c.n_kv_heads));
        std::vector<query_tile> tiles;
        for (const auto& ts : tokens) {
            for (size_t i = 0; i < ts.size(); i += static_cast<size_t>(per_tile)) {
                tiles.push_back({ts.data() + i, static_cast<int32_t>(std::min(ts.size() - i, size_t(per_tile)))});
            }
        }
        std::stable_sort(tiles.begin(), tiles.end(), [&c](const query_tile& a, const query_tile& b) {
            return c.positions[a.tokens[a.n_tokens - 1]] > c.positions[b.tokens[b.n_tokens - 1]];
        });
        // A thread's consecutive items of one tile are one run of kv heads (cut to what the scratch holds),
        // attended in one pass over the tile's blocks.
        rc = run_parallel(par, static_cast<int64_t>(tiles.size()) * c.n_kv_heads, [&](int64_t begin, int64_t end) {
            int64_t item = begin;
            while (item < end) {
                const query_tile& tile = tiles[static_cast<size_t>(item / c.n_kv_heads)];
                const auto h0 = static_cast<int32_t>(item % c.n_kv_heads);
                const int32_t max_run = run_heads(tile.n_tokens * (c.n_heads / c.n_kv_heads), hd);
                const int32_t h1 =
                    static_cast<int32_t>(std::min<int64_t>({c.n_kv_heads, h0 + max_run, h0 + (end - item)}));
                attend_tile(inst->geometry, inst->codec, c, tile, h0, h1, last_pos);
                item += h1 - h0;
            }
        });
        if (rc != TROUPE_OK) return fail(inst, rc, "attention failed in the host's parallel_for");
        return TROUPE_OK;
    });
}

inline int32_t layout(troupe_plugin_instance* inst, const troupe_kv_shape* shape, troupe_kv_layout* out) {
    inst->error.clear();
    return guarded(inst->error, [&]() -> int32_t {
        if (shape == nullptr || out == nullptr || shape->struct_size < sizeof(troupe_kv_shape) ||
            out->struct_size < sizeof(troupe_kv_layout)) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "layout: shape or out is null or older than this plugin's");
        }
        if (shape->backend != TROUPE_BACKEND_CPU) {
            return fail(inst, TROUPE_ERR_UNSUPPORTED,
                        "backend " + std::to_string(shape->backend) + " is not supported (CPU only)");
        }
        if (shape->n_kv_heads <= 0 || shape->head_dim <= 0 || shape->head_dim > max_head_dim ||
            shape->block_size <= 0 || shape->block_size > max_block_size) {
            return fail(inst, TROUPE_ERR_UNSUPPORTED,
                        "shape n_kv_heads " + std::to_string(shape->n_kv_heads) + ", head_dim " +
                            std::to_string(shape->head_dim) + ", block_size " + std::to_string(shape->block_size) +
                            ": needs n_kv_heads > 0, head_dim in 1.." + std::to_string(max_head_dim) +
                            ", block_size in 1.." + std::to_string(max_block_size));
        }
        kv_geometry g{shape->n_kv_heads, shape->head_dim, shape->block_size};
        block_codec codec;
        troupe_kv_layout l{};
        if (std::string why = inst->choice->make(g, inst->level, codec, l); !why.empty()) {
            return fail(inst, TROUPE_ERR_UNSUPPORTED, why);
        }
        const int32_t n_parts = (codec.window_keys ? 1 : 0) + (codec.window_values ? 1 : 0);
        if (n_parts > 0 &&
            (codec.residual_blocks < 1 || codec.residual_blocks > max_residual_blocks ||
             static_cast<size_t>(codec.residual_blocks) * sizeof(int32_t) > window_row_bytes(g, codec))) {
            return fail(inst, TROUPE_ERR_UNSUPPORTED,
                        std::to_string(codec.residual_blocks) +
                            " residual blocks do not fit the window's header row (" +
                            std::to_string(window_row_bytes(g, codec) / sizeof(int32_t)) + " entries, at most " +
                            std::to_string(max_residual_blocks) + ")");
        }
        l.struct_size = sizeof(troupe_kv_layout);
        l.version = TROUPE_KV_LAYOUT_VERSION;
        l.window_tokens = n_parts > 0 ? codec.residual_blocks * g.block_size + 1 : 0;  // + the header row
        l.window_bytes_per_token = static_cast<size_t>(n_parts) * g.n_kv_heads * g.head_dim * sizeof(float);
        *out = l;
        inst->geometry = g;
        inst->codec = codec;
        inst->block_bytes = (static_cast<size_t>(g.block_size) * l.bytes_per_token + l.bytes_per_block + 63) / 64 * 64;
        inst->has_layout = true;
        return TROUPE_OK;
    });
}

// A plugin: name, description, and its own parameters (besides `kernel`), read into a format_choice.
struct plugin_description {
    const char* source;  // "kv/int8"
    std::vector<std::string> param_keys;
    std::unique_ptr<format_choice> (*parse)(param_reader& reader);
};

inline int32_t create(const plugin_description& d, const troupe_plugin_params* params, troupe_plugin_instance** out) {
    std::string error;
    *out = nullptr;
    const int32_t rc = guarded(error, [&]() -> int32_t {
        param_reader reader(params);
        const std::string kernel = reader.choice("kernel", {"auto", "scalar", "avx2", "avx512"}, "auto");
        if (kernel == "avx512" && !cpu_has_avx512()) {
            reader.fail("kernel", "avx512 requested but this CPU lacks AVX-512F/BW/VL");
        }
        if (kernel == "avx2" && !cpu_has_avx2())
            reader.fail("kernel", "avx2 requested but this CPU lacks AVX2/FMA/F16C");
        std::unique_ptr<format_choice> choice = d.parse(reader);
        if (params != nullptr && TROUPE_HAS_FIELD(params, troupe_plugin_params, backend) &&
            params->backend != TROUPE_BACKEND_CPU) {
            error = "backend " + std::to_string(params->backend) + " is not supported (CPU only)";
            return TROUPE_ERR_UNSUPPORTED;
        }
        std::vector<std::string> keys = {"kernel"};
        keys.insert(keys.end(), d.param_keys.begin(), d.param_keys.end());
        if (const std::string& errors = reader.finish(keys); !errors.empty()) {
            error = errors;
            return TROUPE_ERR_INVALID_PARAMS;
        }
        auto* inst = new troupe_plugin_instance;
        inst->source = d.source;
        inst->level = kernel == "avx512" || (kernel == "auto" && cpu_has_avx512()) ? kernel_level::avx512
                      : kernel == "avx2" || (kernel == "auto" && cpu_has_avx2())   ? kernel_level::avx2
                                                                                   : kernel_level::scalar;
        inst->choice = std::move(choice);
        host_log::write(TROUPE_LOG_LEVEL_INFO, d.source, "using the %s kernels", level_name(inst->level));
        *out = inst;
        return TROUPE_OK;
    });
    set_create_error(error);
    return rc;
}

inline void destroy(troupe_plugin_instance* inst) {
    delete inst;
}

inline const char* error_message(const troupe_plugin_instance* inst) {
    return inst != nullptr ? inst->error.c_str() : create_error_buffer();
}

inline int32_t score(int32_t backend) {
    return backend == TROUPE_BACKEND_CPU ? 50 : -1;
}

inline const troupe_kv_ops ops = {sizeof(troupe_kv_ops), TROUPE_KV_OPS_VERSION, layout, forward};

// The descriptor of a KV plugin whose create() is `create_fn` (which calls kv::create with its description).
inline troupe_plugin_descriptor make_descriptor(const char* name, const char* description,
                                                int32_t (*create_fn)(const troupe_plugin_params*,
                                                                     troupe_plugin_instance**)) {
    troupe_plugin_descriptor d{};
    d.struct_size = sizeof(troupe_plugin_descriptor);
    d.version = TROUPE_PLUGIN_DESCRIPTOR_VERSION;
    d.abi_version = TROUPE_PLUGIN_ABI_VERSION;
    d.kind = TROUPE_PLUGIN_KIND_KV;
    d.name = name;
    d.plugin_version = "1.0.0";
    d.description = description;
    d.score = score;
    d.create = create_fn;
    d.destroy = destroy;
    d.error_message = error_message;
    d.kv = &ops;
    return d;
}

}  // namespace troupe::kv
