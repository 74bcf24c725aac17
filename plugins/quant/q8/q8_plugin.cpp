// quant/q8: matrix products with Q8_0 weights (8-bit groups of 32 with an fp16 scale), W8A16 by default.
//
//   - GGUF Q8_0 tensors are used in place, as stored (the weight data must outlive the prepared weight);
//   - where the kernels have them (troupe_kernels, AVX-512 VNNI), the rows are also repacked at load into 16-row
//     panels in memory of the plugin's own (q8_kernels.h), with which a step of many tokens costs
//     far less than that many single steps;
//   - with params `online: true`, F32, F16 and BF16 weights are quantized to Q8_0 at load (rows whose
//     length is not a multiple of 32 are padded with zeros, and so are the activations);
//   - matmul, split over the host's parallel_for, either keeps the activations in float32 and multiplies them
//     with the exactly dequantized weights (W8A16, the default; the recipe of golden/rand10M-greedy-floatact.json),
//     or quantizes them to Q8_0 and takes integer dot products per block (W8A8, llama.cpp's recipe, the one
//     golden/rand10M-greedy.json uses).
//
// Parameters:
//   online: true | false         (default false: claim Q8_0 tensors only)
//   activations: float | int8    (default float: W8A16; int8: W8A8, llama.cpp's CPU recipe)
#include <troupe/plugin.h>

#include <sys/mman.h>

#include <functional>
#include <string>
#include <vector>

#include "plugins/common/plugin_support.h"
#include "q8_kernels.h"

namespace {

using namespace troupe::plugin_support;
using troupe::q8::block_q8_0;
using troupe::q8::qk8_0;

constexpr const char* source = "quant/q8";

}  // namespace

struct troupe_plugin_instance {
    bool online = false;
    troupe::q8::activations activations = troupe::q8::activations::float32;
    std::string error;
};

struct troupe_prepared_weight {
    const block_q8_0* data;  // [n_out] rows of row_stride bytes, n_in_padded / 32 blocks each
    int64_t n_in;            // the caller's row length
    int64_t n_in_padded;     // multiple of 32
    int64_t n_out;
    size_t row_stride;              // bytes
    std::vector<block_q8_0> owned;  // [n_out, n_in_padded / 32] when quantized online, else empty
    // The rows repacked into the kernels' 16-row panels (q8_kernels.h), in memory advised for huge pages; null
    // where the kernels have none. The rows stay valid (the kernels fall back to them where panels are not
    // supported), but are not read while panels are.
    void* panels = nullptr;
    int panel_form = 0;  // what pack_panels returned
    size_t panels_bytes = 0;
    ~troupe_prepared_weight() {
        if (panels != nullptr) ::munmap(panels, panels_bytes);
    }
};

namespace {

int32_t fail(troupe_plugin_instance* inst, int32_t code, std::string message) {
    inst->error = std::move(message);
    return code;
}

std::string type_name(uint32_t type) {
    const char* name = troupe_type_layout_of(type).name;
    return name != nullptr ? std::string(name) : "type " + std::to_string(type);
}

bool is_float_type(uint32_t type) {
    return type == TROUPE_TYPE_F32 || type == TROUPE_TYPE_F16 || type == TROUPE_TYPE_BF16;
}

// Wraps the C parallel context into the std::function the kernels take.
troupe::q8::parallel_fn to_parallel_fn(const troupe_parallel* par, std::atomic<bool>& failed) {
    if (par == nullptr || !TROUPE_HAS_FIELD(par, troupe_parallel, parallel_for) || par->parallel_for == nullptr) {
        return [](int64_t n, const troupe::q8::range_fn& fn) { fn(0, n); };
    }
    return [par, &failed](int64_t n, const troupe::q8::range_fn& fn) {
        auto trampoline = [](void* ctx, int64_t b, int64_t e) {
            (*static_cast<const troupe::q8::range_fn*>(ctx))(b, e);
        };
        if (par->parallel_for(par->host_ctx, n, trampoline, const_cast<troupe::q8::range_fn*>(&fn)) != TROUPE_OK) {
            failed.store(true);
        }
    };
}

// The host's parallel_ranges (troupe_parallel version 3) as the kernels take it; empty where the host has none.
troupe::q8::ranges_fn to_ranges_fn(const troupe_parallel* par, std::atomic<bool>& failed) {
    if (par == nullptr || !TROUPE_HAS_FIELD(par, troupe_parallel, parallel_ranges) || par->parallel_ranges == nullptr) {
        return {};
    }
    return [par, &failed](int64_t n, int64_t grain, const troupe::q8::range_fn& fn) {
        auto trampoline = [](void* ctx, int64_t b, int64_t e) {
            (*static_cast<const troupe::q8::range_fn*>(ctx))(b, e);
        };
        if (par->parallel_ranges(par->host_ctx, n, grain, trampoline, const_cast<troupe::q8::range_fn*>(&fn)) !=
            TROUPE_OK) {
            failed.store(true);
        }
    };
}

int32_t q8_claims(troupe_plugin_instance* inst, uint32_t type) {
    if (type == TROUPE_TYPE_Q8_0) return 1;
    return inst->online && is_float_type(type) ? 1 : 0;
}

int32_t q8_prepare(troupe_plugin_instance* inst, const troupe_weight* w, troupe_prepared_weight** out) {
    inst->error.clear();
    *out = nullptr;
    return guarded(inst->error, [&]() -> int32_t {
        if (w == nullptr || w->struct_size < sizeof(troupe_weight) || w->data == nullptr) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "weight is null, has no data, or is older than this plugin's");
        }
        if (w->n_in <= 0 || w->n_out <= 0) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                        "weight has shape [" + std::to_string(w->n_out) + ", " + std::to_string(w->n_in) +
                            "], expected positive sizes");
        }
        const std::string shape = "[" + std::to_string(w->n_out) + ", " + std::to_string(w->n_in) + "]";
        auto p = new troupe_prepared_weight{nullptr, w->n_in, w->n_in, w->n_out, w->row_stride, {}};
        if (w->type == TROUPE_TYPE_Q8_0) {
            if (w->n_in % qk8_0 != 0 || w->row_stride < troupe_row_bytes(TROUPE_TYPE_Q8_0, w->n_in)) {
                delete p;
                return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                            "Q8_0 weight " + shape + " with row stride " + std::to_string(w->row_stride) +
                                ": rows must be a multiple of 32 elements and at least " +
                                std::to_string(troupe_row_bytes(TROUPE_TYPE_Q8_0, w->n_in - w->n_in % qk8_0)) +
                                " bytes apart");
            }
            p->data = static_cast<const block_q8_0*>(w->data);
        } else if (is_float_type(w->type) && inst->online) {
            const size_t elem = w->type == TROUPE_TYPE_F32 ? 4 : 2;
            if (w->row_stride < elem * static_cast<size_t>(w->n_in)) {
                delete p;
                return fail(inst, TROUPE_ERR_INVALID_ARGUMENT,
                            type_name(w->type) + " weight " + shape + ": row stride " + std::to_string(w->row_stride) +
                                " is below the row's " + std::to_string(elem * w->n_in) + " bytes");
            }
            p->n_in_padded = (w->n_in + qk8_0 - 1) / qk8_0 * qk8_0;
            const int64_t n_blocks = p->n_in_padded / qk8_0;
            p->owned.resize(static_cast<size_t>(w->n_out * n_blocks));
            p->data = p->owned.data();
            p->row_stride = static_cast<size_t>(n_blocks) * sizeof(block_q8_0);
            const uint32_t type = w->type;
            auto work = [&](int64_t b, int64_t e) {
                troupe::q8::quantize_rows(type, w->data, w->row_stride, w->n_in, p->n_in_padded, p->owned.data(), b, e);
            };
            const troupe_host_services* host = host_log::services();
            const int32_t rc =
                host != nullptr && host->parallel_for != nullptr
                    ? host->parallel_for(
                          host->host_ctx, w->n_out,
                          [](void* ctx, int64_t b, int64_t e) { (*static_cast<decltype(work)*>(ctx))(b, e); }, &work)
                    : (work(0, w->n_out), TROUPE_OK);
            if (rc != TROUPE_OK) {
                delete p;
                return fail(inst, rc, "quantizing " + shape + " failed in the host's parallel_for");
            }
        } else {
            delete p;
            return fail(
                inst, TROUPE_ERR_UNSUPPORTED,
                type_name(w->type) + " weights are not taken by quant/q8 (it takes Q8_0" +
                    std::string(inst->online ? ", F32, F16 and BF16" : "; F32, F16 and BF16 with params.online: true") +
                    ")");
        }
        if (const size_t bytes = troupe::q8::panel_bytes(p->n_in_padded, p->n_out, inst->activations); bytes > 0) {
            void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (mem == MAP_FAILED) {
                delete p;
                return fail(inst, TROUPE_ERR_OUT_OF_MEMORY,
                            "cannot allocate " + std::to_string(bytes >> 20) + " MiB for the panels of " + shape);
            }
            ::madvise(mem, bytes, MADV_HUGEPAGE);  // streamed every step: fewer TLB misses
            p->panels = mem;
            p->panels_bytes = bytes;
            p->panel_form = troupe::q8::pack_panels(p->data, p->n_in_padded, p->n_out, p->row_stride, mem);
        }
        *out = p;
        return TROUPE_OK;
    });
}

size_t q8_prepared_bytes(troupe_plugin_instance*, const troupe_prepared_weight* w) {
    return w == nullptr
               ? 0
               : static_cast<size_t>(w->n_out) * static_cast<size_t>(w->n_in_padded / qk8_0) * sizeof(block_q8_0);
}

int32_t q8_matmul(troupe_plugin_instance* inst, const troupe_prepared_weight* w, const float* x, float* y,
                  int64_t n_tokens, const troupe_parallel* par) {
    inst->error.clear();
    return guarded(inst->error, [&]() -> int32_t {
        if (w == nullptr || n_tokens < 0 || (n_tokens > 0 && (x == nullptr || y == nullptr))) {
            return fail(inst, TROUPE_ERR_INVALID_ARGUMENT, "matmul got a null weight or buffer, or n_tokens < 0");
        }
        if (n_tokens == 0) return TROUPE_OK;
        const float* xin = x;
        std::vector<float> x_padded;  // [n_tokens, n_in_padded], for weights padded at load
        if (w->n_in_padded != w->n_in) {
            x_padded.assign(static_cast<size_t>(n_tokens * w->n_in_padded), 0.0f);
            for (int64_t t = 0; t < n_tokens; ++t) {
                std::copy(x + t * w->n_in, x + (t + 1) * w->n_in, x_padded.begin() + t * w->n_in_padded);
            }
            xin = x_padded.data();
        }
        std::atomic<bool> failed{false};
        troupe::q8::matmul(w->data, w->panels, w->panel_form, w->n_in_padded, w->n_out, w->row_stride, xin, y, n_tokens,
                           to_parallel_fn(par, failed), inst->activations, to_ranges_fn(par, failed));
        if (failed.load()) return fail(inst, TROUPE_ERR_INTERNAL, "the host's parallel_for failed");
        return TROUPE_OK;
    });
}

void q8_release(troupe_plugin_instance*, troupe_prepared_weight* w) {
    delete w;
}

int32_t q8_score(int32_t backend) {
    return backend == TROUPE_BACKEND_CPU ? 50 : -1;
}

int32_t q8_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    std::string error;
    *out = nullptr;
    const int32_t rc = guarded(error, [&]() -> int32_t {
        param_reader reader(params);
        const bool online = reader.boolean("online", false);
        const std::string activations = reader.choice("activations", {"float", "int8"}, "float");
        if (params != nullptr && TROUPE_HAS_FIELD(params, troupe_plugin_params, backend) &&
            params->backend != TROUPE_BACKEND_CPU) {
            error = "backend " + std::to_string(params->backend) + " is not supported (CPU only)";
            return TROUPE_ERR_UNSUPPORTED;
        }
        if (const std::string& errors = reader.finish({"online", "activations"}); !errors.empty()) {
            error = errors;
            return TROUPE_ERR_INVALID_PARAMS;
        }
        auto* inst = new troupe_plugin_instance;
        inst->online = online;
        inst->activations = activations == "int8" ? troupe::q8::activations::int8 : troupe::q8::activations::float32;
        host_log::write(TROUPE_LOG_LEVEL_INFO, source, "online quantization %s, %s activations (%s), matmul by %s",
                        online ? "on" : "off", activations.c_str(), activations == "int8" ? "W8A8" : "W8A16",
                        troupe::q8::matmul_implementation());
        *out = inst;
        return TROUPE_OK;
    });
    set_create_error(error);
    return rc;
}

void q8_destroy(troupe_plugin_instance* inst) {
    delete inst;
}

const char* q8_error_message(const troupe_plugin_instance* inst) {
    return inst != nullptr ? inst->error.c_str() : create_error_buffer();
}

const troupe_quant_ops q8_ops = {
    sizeof(troupe_quant_ops),
    TROUPE_QUANT_OPS_VERSION,
    q8_claims,
    q8_prepare,
    q8_prepared_bytes,
    q8_matmul,
    q8_release,
    nullptr,
    nullptr,
    nullptr,  // no placement by the host: its panels stay in its own memory
};

const troupe_plugin_descriptor q8_descriptor = {
    sizeof(troupe_plugin_descriptor),
    TROUPE_PLUGIN_DESCRIPTOR_VERSION,
    TROUPE_PLUGIN_ABI_VERSION,
    TROUPE_PLUGIN_KIND_QUANT,
    "q8",
    "1.0.0",
    "Q8_0 weights (as stored, or quantized online from F32/F16/BF16) with float activations (W8A16, default) or "
    "Q8_0 activations and int8 dot products (W8A8, params.activations: int8)",
    q8_score,
    q8_create,
    q8_destroy,
    q8_error_message,
    nullptr,
    &q8_ops,
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
    return &q8_descriptor;
}
