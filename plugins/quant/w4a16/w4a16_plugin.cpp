// quant/w4a16: matrix products with 4-bit group weights and 16-bit activations (W4A16): GGUF's Q4_1 (groups of 32)
// and troupe's W4_G64 / W4_G128 (w4a16_format.h), the zero-point format of GPTQ and AWQ checkpoints.
//
//   - prepare repacks the rows into the kernels' layout (w4a16_format.h: 128 codes per aligned 64 bytes, the fp16
//     scales and mins after them: the stored bytes, each row padded to 64) in memory of the plugin's own, advised for
//     huge pages (decode streams every byte of every weight each step), checking the shape against the group size;
//   - matmul dequantizes the weights exactly (d * q + m) and multiplies them with the float32 activations by FMA,
//     split over the host's parallel_for in blocks of rows: a decode path for up to 16 tokens and a prefill path
//     of register tiles (w4a16_kernels.h);
//   - the kernels are AVX-512, AVX2 or scalar, the best the CPU runs unless params.kernel names one;
//   - decode (<= 16 tokens) takes 16-bit activations, made once per product: with the AVX-512 kernels rounded to bf16
//     (w4a16_bf16.h; on a CPU with AVX-512 BF16 multiplied in bf16 pairs by vdpbf16ps), with the AVX2 kernels
//     quantized to int16 per group (w4a16_i16.h: the codes meet them in vpmaddwd). Prefill keeps float activations
//     (it is FMA bound).
//
// Parameters:
//   kernel: auto | scalar | avx2 | avx512   (default auto; naming one the CPU cannot run fails create)
//   activations: auto | bf16 | int16 | float  (decode's activations; auto: int16 with the AVX2 kernels, else bf16;
//                                             int16 is w4a16_i16.h's recipe, float the exact float product)
#include <troupe/plugin.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "plugins/common/plugin_support.h"
#include "w4a16_bf16.h"
#include "w4a16_format.h"
#include "w4a16_i16.h"
#include "w4a16_kernels.h"
#ifdef TROUPE_PLUGIN_CUDA
#include "w4a16_cuda.h"
#endif

namespace {

using namespace troupe::plugin_support;
namespace w4 = troupe::w4a16;

constexpr const char* source = "quant/w4a16";
constexpr int64_t k_aligned_floats = 16384;  // decode activations copied to an aligned stack buffer up to this size
#ifdef TROUPE_PLUGIN_CUDA
constexpr bool built_with_cuda = true;  // an instance made for CUDA prepares device weights (w4a16_cuda.h)
#else
constexpr bool built_with_cuda = false;
#endif

bool cpu_runs_avx512() {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

bool cpu_runs_avx512_bf16() {
    return cpu_runs_avx512() && __builtin_cpu_supports("avx512bf16");
}

bool cpu_runs_avx2() {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

}  // namespace

struct troupe_plugin_instance {
    const w4::kernel_set* kernels = nullptr;
    bool bf16_activations = true;                       // decode rounds the activations to bf16
    const w4::bf16_kernel_set* bf16_kernels = nullptr;  // the bf16 decode where `kernels` has one, else null
    w4::i16_decode_fn i16_decode = nullptr;             // decode with int16 activations (w4a16_i16.h), else null
    int32_t backend = TROUPE_BACKEND_CPU;               // CUDA: every weight it prepares is a w4a16_cuda::device_weight
    std::string error;
};

struct troupe_prepared_weight {
    w4::matrix m{};          // the weight's shape; its rows are in `memory` until the host places them
    void* memory = nullptr;  // [n_out, row_stride] bytes, mmap'd; null once placed
    size_t memory_bytes = 0;
    // Placed by the host (w4_place): shard s, rows [bounds[s], bounds[s + 1]), in the host's region s. Empty: not
    // placed (one piece, m).
    std::vector<int64_t> bounds;     // [n_shards + 1]
    std::vector<w4::matrix> shards;  // [n_shards], shards[s].first_row = bounds[s]
    ~troupe_prepared_weight() {
        if (memory != nullptr) ::munmap(memory, memory_bytes);
    }
};

namespace {

// A 64-byte aligned heap buffer for one product.
struct aligned_bytes {
    uint8_t* data;
    explicit aligned_bytes(size_t n)
        : data(static_cast<uint8_t*>(::operator new ((n + 63) / 64 * 64, std::align_val_t{64}))) {}
    ~aligned_bytes() { ::operator delete (data, std::align_val_t{64}); }
    aligned_bytes(const aligned_bytes&) = delete;
    aligned_bytes& operator=(const aligned_bytes&) = delete;
};

int32_t fail(troupe_plugin_instance* inst, int32_t code, std::string message) {
    inst->error = std::move(message);
    return code;
}

// Rows of a decode work item, and the row multiple of a placed weight's shards (so no item straddles two shards).
constexpr int64_t k_decode_item_rows = 16;

// Calls kernel(piece, a, b) over rows [r0, r1) of w: the matrix holding them and the sub-range in it, split where a
// placed weight's shards end.
template <class Kernel>
void for_each_piece(const troupe_prepared_weight& w, int64_t r0, int64_t r1, const Kernel& kernel) {
    if (w.shards.empty()) return kernel(w.m, r0, r1);
    // The shard holding r0: the last whose first row is <= r0.
    auto s = static_cast<size_t>(std::upper_bound(w.bounds.begin(), w.bounds.end() - 1, r0) - w.bounds.begin() - 1);
    for (; r0 < r1; ++s) {
        const int64_t end = std::min(r1, w.bounds[s + 1]);
        if (end > r0) kernel(w.shards[s], r0, end);
        r0 = std::max(r0, end);
    }
}

// Runs fn(item_begin, item_end) over the decode items of w (k_decode_item_rows rows each): shard s on thread s where
// the host placed w and the call's pool has a thread per shard (parallel_shares), else one share per thread of the
// pool (parallel_ranges), else the host's parallel_for (plugin_support.h).
template <class F>
int32_t stream_items(const troupe_parallel* par, const troupe_prepared_weight& w, F&& fn) {
    const int64_t n_items = (w.m.n_out + k_decode_item_rows - 1) / k_decode_item_rows;
    const size_t item_bytes = static_cast<size_t>(k_decode_item_rows) * w.m.row_stride;
    const auto n_shards = static_cast<int32_t>(w.shards.size());
    if (n_shards > 1 && par != nullptr && TROUPE_HAS_FIELD(par, troupe_parallel, n_threads) &&
        par->n_threads == n_shards) {
        std::vector<int64_t> item_bounds(w.bounds.size());  // the shards' rows in items (multiples but the last)
        for (size_t s = 0; s < w.bounds.size(); ++s) {
            item_bounds[s] = (w.bounds[s] + k_decode_item_rows - 1) / k_decode_item_rows;
        }
        return run_shares(par, item_bounds.data(), n_shards, item_bytes, std::forward<F>(fn));
    }
    return run_streaming(par, n_items, item_bytes, std::forward<F>(fn));
}

#ifdef TROUPE_PLUGIN_CUDA
// A CUDA instance's prepared weights are device weights; the host only passes them back.
troupe::w4a16_cuda::device_weight* device_of(const troupe_prepared_weight* w) {
    return reinterpret_cast<troupe::w4a16_cuda::device_weight*>(const_cast<troupe_prepared_weight*>(w));
}
#endif

std::string shape_of(const troupe_weight* w) {
    return "[" + std::to_string(w->n_out) + ", " + std::to_string(w->n_in) + "]";
}

int32_t w4_claims(troupe_plugin_instance*, uint32_t type) {
    return w4::group_size(type) > 0 ? 1 : 0;
}

int32_t w4_prepare(troupe_plugin_instance* inst, const troupe_weight* w, troupe_prepared_weight** out) {
    inst->error.clear();
    *out = nullptr;
    return guarded(inst->error, [&]() -> int32_t {
        if (w == nullptr || w->struct_size < sizeof(troupe_weight) || w->data == nullptr) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "weight is null, has no data, or is older than this plugin's");
        }
        const int g = w4::group_size(w->type);
        if (g == 0) {
            return fail(
                inst, TROUPE_ERR_UNSUPPORTED,
                "type " + std::to_string(w->type) + " is not taken by quant/w4a16 (it takes Q4_1, W4_G64 and W4_G128)");
        }
        const std::string what = std::string(w4::type_name(w->type)) + " weight " + shape_of(w);
        if (w->n_in <= 0 || w->n_out <= 0) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, what + ": expected positive sizes");
        }
        const size_t row_bytes = static_cast<size_t>(w->n_in / g) * w4::block_bytes(g);
        if (w->n_in % g != 0 || w->row_stride < row_bytes) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        what + " with row stride " + std::to_string(w->row_stride) + ": rows must be a multiple of " +
                            std::to_string(g) + " elements and at least " + std::to_string(row_bytes) + " bytes apart");
        }
#ifdef TROUPE_PLUGIN_CUDA
        if (inst->backend == TROUPE_BACKEND_CUDA) {
            troupe::w4a16_cuda::device_weight* d = nullptr;
            const int32_t rc = troupe::w4a16_cuda::prepare(w, g, host_log::services(), &d, &inst->error);
            if (rc != TROUPE_OK) inst->error = what + ": " + inst->error;
            *out = reinterpret_cast<troupe_prepared_weight*>(d);
            return rc;
        }
#endif
        auto p = std::make_unique<troupe_prepared_weight>();
        const size_t stride = w4::layout_row_bytes(w->n_in, g);
        p->memory_bytes = stride * static_cast<size_t>(w->n_out);
        void* mem = ::mmap(nullptr, p->memory_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) {
            return fail(inst, TROUPE_ERR_OUT_OF_MEMORY,
                        "cannot allocate " + std::to_string(p->memory_bytes >> 20) + " MiB for " + what);
        }
        ::madvise(mem, p->memory_bytes, MADV_HUGEPAGE);  // streamed every step: fewer TLB misses
        p->memory = mem;
        p->m = w4::matrix{static_cast<const uint8_t*>(mem), w->n_in, w->n_out, stride, g};
        auto copy = [&](int64_t b, int64_t e) {
            for (int64_t r = b; r < e; ++r) {
                w4::pack_row(static_cast<const uint8_t*>(w->data) + static_cast<size_t>(r) * w->row_stride, w->n_in, g,
                             static_cast<uint8_t*>(mem) + static_cast<size_t>(r) * stride);
            }
        };
        const troupe_host_services* host = host_log::services();
        const int32_t rc =
            host != nullptr && host->parallel_for != nullptr
                ? host->parallel_for(
                      host->host_ctx, w->n_out,
                      [](void* ctx, int64_t b, int64_t e) { (*static_cast<decltype(copy)*>(ctx))(b, e); }, &copy)
                : (copy(0, w->n_out), TROUPE_OK);
        if (rc != TROUPE_OK) return fail(inst, rc, "repacking " + what + " failed in the host's parallel_for");
        *out = p.release();
        return TROUPE_OK;
    });
}

size_t w4_prepared_bytes(troupe_plugin_instance* inst, const troupe_prepared_weight* w) {
#ifdef TROUPE_PLUGIN_CUDA
    if (inst->backend == TROUPE_BACKEND_CUDA) return troupe::w4a16_cuda::prepared_bytes(device_of(w));
#endif
    return w == nullptr ? 0 : static_cast<size_t>(w->m.n_out) * w4::layout_read_bytes(w->m.n_in, w->m.g);
}

int32_t w4_matmul(troupe_plugin_instance* inst, const troupe_prepared_weight* w, const float* x, float* y,
                  int64_t n_tokens, const troupe_parallel* par) {
    inst->error.clear();
    return guarded(inst->error, [&]() -> int32_t {
        if (w == nullptr || n_tokens < 0 || (n_tokens > 0 && (x == nullptr || y == nullptr))) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "matmul got a null weight or buffer, or n_tokens < 0");
        }
        if (n_tokens == 0) return TROUPE_OK;
        const int32_t backend =
            par != nullptr && TROUPE_HAS_FIELD(par, troupe_parallel, backend) ? par->backend : TROUPE_BACKEND_CPU;
        if (backend != inst->backend) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "matmul on backend " + std::to_string(backend) + " with an instance made for backend " +
                            std::to_string(inst->backend) + " (its weights live there)");
        }
#ifdef TROUPE_PLUGIN_CUDA
        if (backend == TROUPE_BACKEND_CUDA) {
            return troupe::w4a16_cuda::matmul(device_of(w), x, y, n_tokens, par->stream, &inst->error);
        }
#endif
        const w4::kernel_set& k = *inst->kernels;
        const w4::matrix& m = w->m;
        int32_t rc;
        if (n_tokens <= w4::k_decode_max_tokens && inst->i16_decode != nullptr) {
            const int64_t u_stride = w4::i16_u_stride(m.n_in, m.g);
            const size_t x_bytes = static_cast<size_t>(n_tokens * m.n_in) * sizeof(int16_t);  // a multiple of 64
            const aligned_bytes buffer(x_bytes + static_cast<size_t>(n_tokens * 2 * u_stride) * sizeof(float));
            auto* xi = reinterpret_cast<int16_t*>(buffer.data);
            auto* u = reinterpret_cast<float*>(buffer.data + x_bytes);  // [n_tokens, 2, u_stride]
            w4::make_i16_activations(x, n_tokens, m.n_in, m.g, xi, u);
            const w4::i16_activations a{xi, u, n_tokens, m.n_in, m.n_in / m.g, u_stride};
            constexpr int64_t rows = k_decode_item_rows;
            rc = stream_items(par, *w, [&](int64_t b, int64_t e) {
                for_each_piece(
                    *w, b * rows, std::min(e * rows, m.n_out),
                    [&](const w4::matrix& piece, int64_t r0, int64_t r1) { inst->i16_decode(piece, a, y, r0, r1); });
            });
        } else if (n_tokens <= w4::k_decode_max_tokens && inst->bf16_kernels != nullptr) {
            const int64_t u_stride = w4::bf16_u_stride(m.n_in, m.g);
            const size_t x_bytes = static_cast<size_t>(n_tokens * m.n_in) * sizeof(uint16_t);  // a multiple of 64
            const aligned_bytes buffer(x_bytes + static_cast<size_t>(n_tokens * u_stride) * sizeof(float));
            auto* xb = reinterpret_cast<uint16_t*>(buffer.data);        // [n_tokens, n_in] bf16 in pair order
            auto* u = reinterpret_cast<float*>(buffer.data + x_bytes);  // [n_tokens, u_stride]
            inst->bf16_kernels->make_activations(x, n_tokens, m.n_in, m.g, xb, u);
            const w4::bf16_activations a{xb, u, n_tokens, m.n_in, u_stride};
            constexpr int64_t rows = k_decode_item_rows;
            rc = stream_items(par, *w, [&](int64_t b, int64_t e) {
                for_each_piece(*w, b * rows, std::min(e * rows, m.n_out),
                               [&](const w4::matrix& piece, int64_t r0, int64_t r1) {
                                   inst->bf16_kernels->decode(piece, a, y, r0, r1);
                               });
            });
        } else if (n_tokens <= w4::k_decode_max_tokens) {
            // Activations 64-byte aligned (std::vector's are not), so no load of them splits a cache line.
            alignas(64) float aligned[k_aligned_floats];
            const float* xa = x;
            std::unique_ptr<float[]> rounded;  // [n_tokens, n_in] where too large for `aligned`
            if (inst->bf16_activations) {      // the bf16 recipe by the float decode: x rounded first
                float* dst = aligned;
                if (n_tokens * m.n_in > k_aligned_floats) {
                    rounded.reset(new float[static_cast<size_t>(n_tokens * m.n_in)]);
                    dst = rounded.get();
                }
                for (int64_t i = 0; i < n_tokens * m.n_in; ++i) dst[i] = w4::bf16_round(x[i]);
                xa = dst;
            } else if (reinterpret_cast<uintptr_t>(x) % 64 != 0 && n_tokens * m.n_in <= k_aligned_floats) {
                std::memcpy(aligned, x, static_cast<size_t>(n_tokens * m.n_in) * sizeof(float));
                xa = aligned;
            }
            constexpr int64_t rows = k_decode_item_rows;
            rc = stream_items(par, *w, [&](int64_t b, int64_t e) {
                for_each_piece(
                    *w, b * rows, std::min(e * rows, m.n_out),
                    [&](const w4::matrix& piece, int64_t r0, int64_t r1) { k.decode(piece, xa, n_tokens, y, r0, r1); });
            });
        } else {
            const int64_t n_pad =
                (n_tokens + w4::k_prefill_token_pad - 1) / w4::k_prefill_token_pad * w4::k_prefill_token_pad;
            // [n_in, n_pad]; every element is written by the transposition (no zeroing here)
            const std::unique_ptr<float[]> xt(new float[static_cast<size_t>(m.n_in * n_pad)]);
            constexpr int64_t cols = 64;  // columns of x per transposition item
            rc = run_parallel(par, (m.n_in + cols - 1) / cols, [&](int64_t b, int64_t e) {
                w4::transpose_activations(x, n_tokens, m.n_in, n_pad, xt.get(), b * cols, std::min(e * cols, m.n_in));
            });
            const int64_t rows = k.prefill_rows;
            if (rc == TROUPE_OK) {
                rc = run_parallel(par, (m.n_out + rows - 1) / rows, [&](int64_t b, int64_t e) {
                    for_each_piece(*w, b * rows, std::min(e * rows, m.n_out),
                                   [&](const w4::matrix& piece, int64_t r0, int64_t r1) {
                                       k.prefill(piece, xt.get(), n_pad, n_tokens, y, r0, r1);
                                   });
                });
            }
        }
        if (rc != TROUPE_OK) return fail(inst, rc, "the host's parallel_for failed");
        return TROUPE_OK;
    });
}

int64_t w4_placement_rows(troupe_plugin_instance* inst, const troupe_prepared_weight* w) {
    if (inst->backend != TROUPE_BACKEND_CPU || w == nullptr || !w->shards.empty()) return 0;  // placed once
    return k_decode_item_rows;
}

size_t w4_placed_bytes(troupe_plugin_instance* inst, const troupe_prepared_weight* w, int64_t r0, int64_t r1) {
    if (w4_placement_rows(inst, w) == 0 || r0 < 0 || r1 < r0 || r1 > w->m.n_out) return 0;
    return static_cast<size_t>(r1 - r0) * w->m.row_stride;
}

// Moves the rows into the host's shards (each thread's region), then frees the plugin's copy. The rows keep their
// bytes and the kernels their order of operations, so products are unchanged bit for bit.
int32_t w4_place(troupe_plugin_instance* inst, troupe_prepared_weight* w, const troupe_placement* p) {
    inst->error.clear();
    return guarded(inst->error, [&]() -> int32_t {
        if (w4_placement_rows(inst, w) == 0) {
            return fail(inst, TROUPE_ERR_UNSUPPORTED,
                        "place: only a CPU instance's weight not placed before can be placed");
        }
        if (p == nullptr || p->struct_size < sizeof(troupe_placement) || p->n_shards < 1 || p->bounds == nullptr ||
            p->dsts == nullptr) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "place: no placement, or one without shards");
        }
        const std::string what = "place: shard bounds of a weight of " + std::to_string(w->m.n_out) + " rows";
        if (p->bounds[0] != 0 || p->bounds[p->n_shards] != w->m.n_out) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, what + " must run from 0 to " + std::to_string(w->m.n_out));
        }
        for (int32_t s = 0; s < p->n_shards; ++s) {
            const int64_t b = p->bounds[s];
            if (b > p->bounds[s + 1] || b % k_decode_item_rows != 0 || p->dsts[s] == nullptr ||
                reinterpret_cast<uintptr_t>(p->dsts[s]) % 64 != 0) {
                return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                            what + ": shard " + std::to_string(s) + " starts at row " + std::to_string(b) +
                                " (must ascend, at multiples of " + std::to_string(k_decode_item_rows) +
                                ") or has no 64-byte aligned destination");
            }
        }
        std::vector<int64_t> bounds(p->bounds, p->bounds + p->n_shards + 1);
        std::vector<w4::matrix> shards(static_cast<size_t>(p->n_shards));
        for (int32_t s = 0; s < p->n_shards; ++s) {
            w4::matrix& shard = shards[static_cast<size_t>(s)];
            shard = w->m;
            shard.data = p->dsts[s];
            shard.first_row = bounds[static_cast<size_t>(s)];
            const size_t n_bytes =
                static_cast<size_t>(bounds[static_cast<size_t>(s) + 1] - shard.first_row) * w->m.row_stride;
            if (n_bytes > 0) std::memcpy(p->dsts[s], w->m.row(shard.first_row), n_bytes);
        }
        w->bounds = std::move(bounds);
        w->shards = std::move(shards);
        ::munmap(w->memory, w->memory_bytes);
        w->memory = nullptr;
        w->m.data = nullptr;  // every read goes through the shards now (for_each_piece)
        return TROUPE_OK;
    });
}

void w4_release(troupe_plugin_instance* inst, troupe_prepared_weight* w) {
#ifdef TROUPE_PLUGIN_CUDA
    if (inst->backend == TROUPE_BACKEND_CUDA) return troupe::w4a16_cuda::release(device_of(w));
#endif
    delete w;
}

int32_t w4_score(int32_t backend) {
    return backend == TROUPE_BACKEND_CPU || (built_with_cuda && backend == TROUPE_BACKEND_CUDA) ? 50 : -1;
}

// The kernels params.kernel names, or an error message.
const w4::kernel_set* pick_kernels(const std::string& choice, std::string* error) {
    const w4::kernel_set* avx512 = cpu_runs_avx512() ? w4::avx512_kernels() : nullptr;
    const w4::kernel_set* avx2 = cpu_runs_avx2() ? w4::avx2_kernels() : nullptr;
    if (choice == "auto") return avx512 != nullptr ? avx512 : avx2 != nullptr ? avx2 : &w4::scalar_kernels();
    if (choice == "scalar") return &w4::scalar_kernels();
    const w4::kernel_set* named = choice == "avx512" ? avx512 : avx2;
    if (named == nullptr) {
        *error = "params.kernel: " + choice + " is not available on this CPU or in this build (use auto or scalar)";
    }
    return named;
}

int32_t w4_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    std::string error;
    *out = nullptr;
    const int32_t rc = guarded(error, [&]() -> int32_t {
        param_reader reader(params);
        const std::string kernel = reader.choice("kernel", {"auto", "scalar", "avx2", "avx512"}, "auto");
        std::string activations = reader.choice("activations", {"auto", "bf16", "int16", "float"}, "auto");
        const int32_t backend = params != nullptr && TROUPE_HAS_FIELD(params, troupe_plugin_params, backend)
                                    ? params->backend
                                    : TROUPE_BACKEND_CPU;
        if (backend != TROUPE_BACKEND_CPU && !(built_with_cuda && backend == TROUPE_BACKEND_CUDA)) {
            error = "backend " + std::to_string(backend) + " is not supported (" +
                    (built_with_cuda ? "CPU and CUDA" : "CPU only") + ")";
            return TROUPE_ERR_UNSUPPORTED;
        }
        if (const std::string& errors = reader.finish({"kernel", "activations"}); !errors.empty()) {
            error = errors;
            return TROUPE_ERR_INVALID_PARAMS;
        }
        const w4::kernel_set* kernels = pick_kernels(kernel, &error);
        if (kernels == nullptr) return TROUPE_ERR_INVALID_PARAMS;
        // auto: int16 where the kernels are AVX2's (their float decode is compute bound far below the memory's
        // speed, w4a16_i16.h), else bf16 (the AVX-512 BF16 kernel, or the float decode on rounded activations).
        if (activations == "auto") activations = kernels == w4::avx2_kernels() ? "int16" : "bf16";
        auto* inst = new troupe_plugin_instance;
        inst->kernels = kernels;
        inst->bf16_activations = activations == "bf16";
        if (activations == "int16") {
            inst->i16_decode = kernels == &w4::scalar_kernels() ? w4::i16_decode_scalar() : nullptr;
            if (inst->i16_decode == nullptr) {  // the AVX2 kernel, which AVX-512 CPUs run too
                inst->i16_decode = cpu_runs_avx2() && w4::i16_decode_avx2() != nullptr ? w4::i16_decode_avx2()
                                                                                       : w4::i16_decode_scalar();
            }
        }
        if (inst->bf16_activations && kernels == w4::avx512_kernels() && cpu_runs_avx512_bf16()) {
            inst->bf16_kernels = w4::avx512_bf16_kernels();
        }
        inst->backend = backend;
        host_log::write(TROUPE_LOG_LEVEL_INFO, source,
                        "Q4_1 / W4_G64 / W4_G128 weights, %s activations in decode, %s kernels", activations.c_str(),
                        backend == TROUPE_BACKEND_CUDA                ? "cuda"
                        : inst->bf16_kernels != nullptr               ? inst->bf16_kernels->name
                        : inst->i16_decode == w4::i16_decode_scalar() ? "scalar"
                        : inst->i16_decode != nullptr                 ? "avx2"
                                                                      : kernels->name);
        *out = inst;
        return TROUPE_OK;
    });
    set_create_error(error);
    return rc;
}

void w4_destroy(troupe_plugin_instance* inst) {
    delete inst;
}

const char* w4_error_message(const troupe_plugin_instance* inst) {
    return inst != nullptr ? inst->error.c_str() : create_error_buffer();
}

const troupe_quant_ops w4_ops = {
    sizeof(troupe_quant_ops), TROUPE_QUANT_OPS_VERSION, w4_claims, w4_prepare, w4_prepared_bytes, w4_matmul, w4_release,
    w4_placement_rows,        w4_placed_bytes,          w4_place,
};

const troupe_plugin_descriptor w4_descriptor = {
    sizeof(troupe_plugin_descriptor),
    TROUPE_PLUGIN_DESCRIPTOR_VERSION,
    TROUPE_PLUGIN_ABI_VERSION,
    TROUPE_PLUGIN_KIND_QUANT,
    "w4a16",
    "1.0.0",
    "4-bit group weights with scales and mins (Q4_1, W4_G64, W4_G128: GPTQ/AWQ's zero-point format) dequantized "
    "exactly and multiplied with activations rounded to bf16 in decode, float in prefill (W4A16)",
    w4_score,
    w4_create,
    w4_destroy,
    w4_error_message,
    nullptr,
    &w4_ops,
    nullptr,
    nullptr,  // kv
    nullptr,  // quantize
    nullptr,  // taps
};

}  // namespace

extern "C" TROUPE_PLUGIN_EXPORT const troupe_plugin_descriptor* troupe_plugin_query(uint32_t host_abi_min,
                                                                                    uint32_t host_abi_max,
                                                                                    const troupe_host_services* host) {
    host_log::attach(host);
    return &w4_descriptor;
}
