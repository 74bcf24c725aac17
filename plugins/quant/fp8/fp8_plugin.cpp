// quant/fp8: FP8 weights (E4M3 or E5M2) with one float32 scale per output row, quantized at load from F32, F16
// and BF16 matrices, multiplied with float32 activations; the codes become floats in registers (fp8_panels.h).
//
//   - prepare: scale = max|row| / max_finite(format), each weight rounded to the nearest fp8 value (ties to even,
//     saturating; plugins/common/fp8.h), written into 32-row panels in memory of the plugin's own (advised for
//     huge pages), 1 byte per weight plus 8 bytes of scales per row; rows holding NaN or infinity are refused;
//   - matmul: y = x * W^T split over the caller's parallel_for by panels; one kernel for every token count
//     (token tiles; decode streams each weight byte once), AVX-512, AVX2 or the scalar twin, chosen at create.
//
// Parameters:
//   format: e4m3 | e5m2                  (default e4m3: 3 mantissa bits, range +-448 times the row's scale;
//                                         e5m2: 2 mantissa bits, a wider range the per-row scale rarely needs)
//   kernel: auto | scalar | avx2 | avx512 (default auto: the widest the CPU has)
#include <troupe/plugin.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fp8_panels.h"
#ifdef TROUPE_PLUGIN_CUDA
#include "fp8_cuda.h"
#endif
#include "plugins/common/plugin_support.h"

namespace {

using namespace troupe::plugin_support;
namespace panels = troupe::fp8_panels;
using panels::source_type;

constexpr const char* source = "quant/fp8";
#ifdef TROUPE_PLUGIN_CUDA
constexpr bool built_with_cuda = true;  // an instance made for CUDA prepares device weights (fp8_cuda.h)
#else
constexpr bool built_with_cuda = false;
#endif

}  // namespace

struct troupe_plugin_instance {
    troupe::fp8::format format = troupe::fp8::format::e4m3;
    panels::kernel kernel = panels::kernel::scalar;
    int32_t backend = TROUPE_BACKEND_CPU;  // CUDA: every weight it prepares is an fp8_cuda::device_weight
    std::string error;
};

struct troupe_prepared_weight {
    panels::matrix m;
    void* memory = nullptr;  // codes, then scales, then kernel scales (mmap); null once placed
    size_t memory_bytes = 0;
    // Placed by the host (fp8_place): shard s, panels [panel_bounds[s], panel_bounds[s + 1]), in the host's region s
    // as codes, scales, kernel scales. Unplaced: one shard, m.
    std::vector<int64_t> panel_bounds = {0, 0};
    std::vector<panels::matrix> parts;
    bool placed = false;
    panels::shards view() const {
        return panels::shards{parts.data(), panel_bounds.data(), static_cast<int32_t>(parts.size())};
    }
    ~troupe_prepared_weight() {
        if (memory != nullptr) ::munmap(memory, memory_bytes);
    }
};

namespace {

int32_t fail(troupe_plugin_instance* inst, int32_t code, std::string message) {
    inst->error = std::move(message);
    return code;
}

// The source types this plugin quantizes (GGUF numbering), with their names and element sizes.
struct source_info {
    source_type type;
    const char* name;
    size_t element_bytes;
};

const source_info* find_source(uint32_t type) {
    static const source_info sources[] = {
        {source_type::f32, "F32", 4}, {source_type::f16, "F16", 2}, {source_type::bf16, "BF16", 2}};
    for (const source_info& s : sources) {
        if (static_cast<uint32_t>(s.type) == type) return &s;
    }
    return nullptr;
}

#ifdef TROUPE_PLUGIN_CUDA
// A CUDA instance's prepared weights are device weights; the host only passes them back.
troupe::fp8_cuda::device_weight* device_of(const troupe_prepared_weight* w) {
    return reinterpret_cast<troupe::fp8_cuda::device_weight*>(const_cast<troupe_prepared_weight*>(w));
}
#endif

const char* format_name(troupe::fp8::format f) {
    return f == troupe::fp8::format::e4m3 ? "e4m3" : "e5m2";
}

int32_t fp8_claims(troupe_plugin_instance*, uint32_t type) {
    return find_source(type) != nullptr ? 1 : 0;
}

// Runs f(begin, end) over [0, n) on the host's general pool (work outside op calls), or inline without one.
template <class F>
int32_t run_on_host(int64_t n, F& f) {
    const troupe_host_services* host = host_log::services();
    if (host == nullptr || !TROUPE_HAS_FIELD(host, troupe_host_services, parallel_for) ||
        host->parallel_for == nullptr) {
        f(0, n);
        return TROUPE_OK;
    }
    return host->parallel_for(
        host->host_ctx, n, [](void* ctx, int64_t b, int64_t e) { (*static_cast<F*>(ctx))(b, e); }, &f);
}

int32_t fp8_prepare(troupe_plugin_instance* inst, const troupe_weight* w, troupe_prepared_weight** out) {
    inst->error.clear();
    *out = nullptr;
    return guarded(inst->error, [&]() -> int32_t {
        if (w == nullptr || w->struct_size < sizeof(troupe_weight) || w->data == nullptr) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "weight is null, has no data, or is older than this plugin's");
        }
        const std::string shape = "[" + std::to_string(w->n_out) + ", " + std::to_string(w->n_in) + "]";
        if (w->n_in <= 0 || w->n_out <= 0) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "weight has shape " + shape + ", expected positive sizes");
        }
        const source_info* src = find_source(w->type);
        if (src == nullptr) {
            return fail(inst, TROUPE_ERR_UNSUPPORTED,
                        "type " + std::to_string(w->type) +
                            " weights are not taken by quant/fp8 (it quantizes F32, F16 and BF16 ones)");
        }
        if (w->row_stride < src->element_bytes * static_cast<size_t>(w->n_in)) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        std::string(src->name) + " weight " + shape + ": row stride " + std::to_string(w->row_stride) +
                            " is below the row's " + std::to_string(src->element_bytes * w->n_in) + " bytes");
        }
        auto p = std::make_unique<troupe_prepared_weight>();
        panels::matrix& m = p->m;
        m.format = inst->format;
        m.n_in = w->n_in;
        m.n_out = w->n_out;
        m.n_panels = (w->n_out + panels::panel_rows - 1) / panels::panel_rows;
        const size_t codes = panels::code_bytes(m.n_in, m.n_out), scales = panels::scale_bytes(m.n_out);
        p->memory_bytes = codes + 2 * scales;
        void* mem = ::mmap(nullptr, p->memory_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) {
            p->memory = nullptr;
            return fail(
                inst, TROUPE_ERR_OUT_OF_MEMORY,
                "cannot allocate " + std::to_string(p->memory_bytes >> 20) + " MiB for the fp8 form of " + shape);
        }
        ::madvise(mem, p->memory_bytes, MADV_HUGEPAGE);  // streamed every step: fewer TLB misses
        p->memory = mem;                                 // zeros: the padding rows stay 0 with scale 0
        auto* code_mem = static_cast<uint8_t*>(mem);
        auto* scale_mem = reinterpret_cast<float*>(code_mem + codes);
        auto* kernel_scale_mem = reinterpret_cast<float*>(code_mem + codes + scales);
        m.codes = code_mem;
        m.scales = scale_mem;
        m.kernel_scales = kernel_scale_mem;
        p->parts = {m};
        p->panel_bounds = {0, m.n_panels};

        // Whole panels per task: a panel's rows interleave in its bytes.
        std::atomic<int64_t> bad_row{-1};
        auto work = [&](int64_t b, int64_t e) {
            const int64_t r =
                panels::quantize_rows(src->type, w->data, w->row_stride, m, code_mem, scale_mem, kernel_scale_mem,
                                      b * panels::panel_rows, std::min(m.n_out, e * panels::panel_rows));
            if (r >= 0) bad_row.store(r);
        };
        if (const int32_t rc = run_on_host(m.n_panels, work); rc != TROUPE_OK) {
            return fail(inst, rc, "quantizing " + shape + " failed in the host's parallel_for");
        }
        if (bad_row.load() >= 0) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        std::string(src->name) + " weight " + shape + ": row " + std::to_string(bad_row.load()) +
                            " holds a NaN or an infinity, which fp8 with a per-row scale cannot represent");
        }
#ifdef TROUPE_PLUGIN_CUDA
        if (inst->backend == TROUPE_BACKEND_CUDA) {  // the same codes and scales, moved to the device
            troupe::fp8_cuda::device_weight* d = nullptr;
            const int32_t rc = troupe::fp8_cuda::upload(m, &d, &inst->error);
            if (rc != TROUPE_OK) inst->error = std::string(src->name) + " weight " + shape + ": " + inst->error;
            *out = reinterpret_cast<troupe_prepared_weight*>(d);
            return rc;
        }
#endif
        *out = p.release();
        return TROUPE_OK;
    });
}

size_t fp8_prepared_bytes(troupe_plugin_instance* inst, const troupe_prepared_weight* w) {
#ifdef TROUPE_PLUGIN_CUDA
    if (inst->backend == TROUPE_BACKEND_CUDA) return troupe::fp8_cuda::prepared_bytes(device_of(w));
#endif
    // What a product reads: the codes (padding rows included) and the kernels' scales.
    return w == nullptr ? 0 : panels::code_bytes(w->m.n_in, w->m.n_out) + panels::scale_bytes(w->m.n_out);
}

int32_t fp8_matmul(troupe_plugin_instance* inst, const troupe_prepared_weight* w, const float* x, float* y,
                   int64_t n_tokens, const troupe_parallel* par) {
    inst->error.clear();
    return guarded(inst->error, [&]() -> int32_t {
        if (w == nullptr || n_tokens < 0 || (n_tokens > 0 && (x == nullptr || y == nullptr))) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "matmul got a null weight or buffer, or n_tokens < 0");
        }
        const int32_t backend =
            par != nullptr && TROUPE_HAS_FIELD(par, troupe_parallel, backend) ? par->backend : TROUPE_BACKEND_CPU;
        if (backend != inst->backend) {
            return fail(inst, TROUPE_ERR_UNSUPPORTED,
                        "matmul on backend " + std::to_string(backend) + " with an instance made for backend " +
                            std::to_string(inst->backend) + " (its weights live there)");
        }
#ifdef TROUPE_PLUGIN_CUDA
        if (backend == TROUPE_BACKEND_CUDA) {
            if (n_tokens == 0) return TROUPE_OK;
            return troupe::fp8_cuda::matmul(device_of(w), x, y, n_tokens, par->stream, &inst->error);
        }
#endif
        std::atomic<bool> failed{false};
        const panels::parallel_fn parallel_for = [par, &failed](int64_t n, size_t bytes_per_item, const int64_t* bounds,
                                                                int32_t n_shares, const panels::range_fn& fn) {
            // A placed weight's shards on their threads where the pool has a thread per shard.
            const bool on_shards = bounds != nullptr && par != nullptr &&
                                   TROUPE_HAS_FIELD(par, troupe_parallel, n_threads) && par->n_threads == n_shares;
            const int32_t rc = bytes_per_item == 0 ? run_parallel(par, n, fn)
                               : on_shards         ? run_shares(par, bounds, n_shares, bytes_per_item, fn)
                                                   : run_streaming(par, n, bytes_per_item, fn);
            if (rc != TROUPE_OK) failed.store(true);
        };
        panels::matmul(inst->kernel, w->view(), x, y, n_tokens, parallel_for);
        if (failed.load()) return fail(inst, TROUPE_ERR_INTERNAL, "the host's parallel_for failed");
        return TROUPE_OK;
    });
}

int64_t fp8_placement_rows(troupe_plugin_instance* inst, const troupe_prepared_weight* w) {
    if (inst->backend != TROUPE_BACKEND_CPU || w == nullptr || w->placed) return 0;  // placed once
    return panels::panel_rows;
}

// A shard of rows [r0, r1) (r0 a panel's first row): its panels' codes, then their rows' scales and kernel scales.
size_t shard_bytes(int64_t n_in, int64_t r0, int64_t r1) {
    return panels::code_bytes(n_in, r1 - r0) + 2 * panels::scale_bytes(r1 - r0);
}

size_t fp8_placed_bytes(troupe_plugin_instance* inst, const troupe_prepared_weight* w, int64_t r0, int64_t r1) {
    if (fp8_placement_rows(inst, w) == 0 || r0 < 0 || r1 < r0 || r1 > w->m.n_out) return 0;
    return shard_bytes(w->m.n_in, r0, r1);
}

// Moves the panels into the host's shards (each thread's region), then frees the plugin's copy. The panels keep their
// bytes and the kernels their order of operations, so products are unchanged bit for bit.
int32_t fp8_place(troupe_plugin_instance* inst, troupe_prepared_weight* w, const troupe_placement* p) {
    inst->error.clear();
    return guarded(inst->error, [&]() -> int32_t {
        if (fp8_placement_rows(inst, w) == 0) {
            return fail(inst, TROUPE_ERR_UNSUPPORTED,
                        "place: only a CPU instance's weight not placed before can be placed");
        }
        if (p == nullptr || p->struct_size < sizeof(troupe_placement) || p->n_shards < 1 || p->bounds == nullptr ||
            p->dsts == nullptr) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "place: no placement, or one without shards");
        }
        const panels::matrix& m = w->m;
        const std::string what = "place: shard bounds of a weight of " + std::to_string(m.n_out) + " rows";
        if (p->bounds[0] != 0 || p->bounds[p->n_shards] != m.n_out) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, what + " must run from 0 to " + std::to_string(m.n_out));
        }
        for (int32_t s = 0; s < p->n_shards; ++s) {
            const int64_t b = p->bounds[s];
            if (b > p->bounds[s + 1] || b % panels::panel_rows != 0 || p->dsts[s] == nullptr ||
                reinterpret_cast<uintptr_t>(p->dsts[s]) % 64 != 0) {
                return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                            what + ": shard " + std::to_string(s) + " starts at row " + std::to_string(b) +
                                " (must ascend, at multiples of " + std::to_string(panels::panel_rows) +
                                ") or has no 64-byte aligned destination");
            }
        }
        std::vector<int64_t> panel_bounds(static_cast<size_t>(p->n_shards) + 1);
        std::vector<panels::matrix> parts(static_cast<size_t>(p->n_shards));
        for (int32_t s = 0; s < p->n_shards; ++s) {
            const int64_t r0 = p->bounds[s], r1 = p->bounds[s + 1];
            const int64_t p0 = r0 / panels::panel_rows, p1 = (r1 + panels::panel_rows - 1) / panels::panel_rows;
            panel_bounds[static_cast<size_t>(s)] = p0;
            panel_bounds[static_cast<size_t>(s) + 1] = p1;
            panels::matrix& part = parts[static_cast<size_t>(s)];
            part = m;
            part.first_panel = p0;
            const size_t codes = panels::code_bytes(m.n_in, r1 - r0), scales = panels::scale_bytes(r1 - r0);
            uint8_t* dst = p->dsts[s];
            part.codes = dst;
            part.scales = reinterpret_cast<const float*>(dst + codes);
            part.kernel_scales = reinterpret_cast<const float*>(dst + codes + scales);
            if (p1 == p0) continue;
            std::memcpy(dst, m.panel_codes(p0), static_cast<size_t>((p1 - p0) * m.n_in * panels::panel_rows));
            std::memcpy(dst + codes, m.row_scales(r0), static_cast<size_t>(p1 - p0) * panels::panel_rows * 4);
            std::memcpy(dst + codes + scales, m.row_kernel_scales(r0),
                        static_cast<size_t>(p1 - p0) * panels::panel_rows * 4);
        }
        w->panel_bounds = std::move(panel_bounds);
        w->parts = std::move(parts);
        w->placed = true;
        ::munmap(w->memory, w->memory_bytes);
        w->memory = nullptr;
        w->m.codes = nullptr;  // every read goes through the shards now
        w->m.scales = w->m.kernel_scales = nullptr;
        return TROUPE_OK;
    });
}

void fp8_release(troupe_plugin_instance* inst, troupe_prepared_weight* w) {
#ifdef TROUPE_PLUGIN_CUDA
    if (inst->backend == TROUPE_BACKEND_CUDA) return troupe::fp8_cuda::release(device_of(w));
#endif
    delete w;
}

int32_t fp8_score(int32_t backend) {
    return backend == TROUPE_BACKEND_CPU || (built_with_cuda && backend == TROUPE_BACKEND_CUDA) ? 50 : -1;
}

int32_t fp8_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    std::string error;
    *out = nullptr;
    const int32_t rc = guarded(error, [&]() -> int32_t {
        param_reader reader(params);
        const std::string format = reader.choice("format", {"e4m3", "e5m2"}, "e4m3");
        const std::string kernel = reader.choice("kernel", {"auto", "scalar", "avx2", "avx512"}, "auto");
        if (kernel == "avx2" && !panels::cpu_has(panels::kernel::avx2)) {
            reader.fail("kernel", "avx2 requested but this CPU lacks AVX2/FMA/F16C");
        }
        if (kernel == "avx512" && !panels::cpu_has(panels::kernel::avx512)) {
            reader.fail("kernel", "avx512 requested but this CPU lacks AVX-512F");
        }
        const int32_t backend = params != nullptr && TROUPE_HAS_FIELD(params, troupe_plugin_params, backend)
                                    ? params->backend
                                    : TROUPE_BACKEND_CPU;
        if (backend != TROUPE_BACKEND_CPU && !(built_with_cuda && backend == TROUPE_BACKEND_CUDA)) {
            error = "backend " + std::to_string(backend) + " is not supported (" +
                    (built_with_cuda ? "CPU and CUDA" : "CPU only") + ")";
            return TROUPE_ERR_UNSUPPORTED;
        }
        if (const std::string& errors = reader.finish({"format", "kernel"}); !errors.empty()) {
            error = errors;
            return TROUPE_ERR_INVALID_PARAMS;
        }
        auto* inst = new troupe_plugin_instance;
        inst->format = format == "e5m2" ? troupe::fp8::format::e5m2 : troupe::fp8::format::e4m3;
        inst->backend = backend;
        if (kernel == "avx512" || (kernel == "auto" && panels::cpu_has(panels::kernel::avx512))) {
            inst->kernel = panels::kernel::avx512;
        } else if (kernel == "avx2" || (kernel == "auto" && panels::cpu_has(panels::kernel::avx2))) {
            inst->kernel = panels::kernel::avx2;
        } else {
            inst->kernel = panels::kernel::scalar;
        }
        host_log::write(TROUPE_LOG_LEVEL_INFO, source, "%s weights with per-row scales, %s kernels",
                        format_name(inst->format),
                        backend == TROUPE_BACKEND_CUDA ? "cuda" : panels::name(inst->kernel));
        *out = inst;
        return TROUPE_OK;
    });
    set_create_error(error);
    return rc;
}

void fp8_destroy(troupe_plugin_instance* inst) {
    delete inst;
}

const char* fp8_error_message(const troupe_plugin_instance* inst) {
    return inst != nullptr ? inst->error.c_str() : create_error_buffer();
}

const troupe_quant_ops fp8_ops = {
    sizeof(troupe_quant_ops),
    TROUPE_QUANT_OPS_VERSION,
    fp8_claims,
    fp8_prepare,
    fp8_prepared_bytes,
    fp8_matmul,
    fp8_release,
    fp8_placement_rows,
    fp8_placed_bytes,
    fp8_place,
};

const troupe_plugin_descriptor fp8_descriptor = {
    sizeof(troupe_plugin_descriptor),
    TROUPE_PLUGIN_DESCRIPTOR_VERSION,
    TROUPE_PLUGIN_ABI_VERSION,
    TROUPE_PLUGIN_KIND_QUANT,
    "fp8",
    "1.0.0",
    "FP8 weights (E4M3 or E5M2, params.format) with per-row float scales, quantized at load from F32/F16/BF16, "
    "float activations",
    fp8_score,
    fp8_create,
    fp8_destroy,
    fp8_error_message,
    nullptr,
    &fp8_ops,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace

extern "C" TROUPE_PLUGIN_EXPORT const troupe_plugin_descriptor* troupe_plugin_query(uint32_t, uint32_t,
                                                                                    const troupe_host_services* host) {
    host_log::attach(host);
    return &fp8_descriptor;
}
