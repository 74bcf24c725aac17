// spec/ngram: prompt-lookup drafting. The last k tokens of the context are looked up earlier in the
// context (the most recent earlier occurrence wins), for k from ngram_max down to ngram_min; the
// tokens that followed that occurrence are the draft. The core verifies every draft token.
//
//   context: ... a b c d x y ... a b c   (k = 3, "a b c" seen before)  ->  draft: d x y ...
//
// Parameters:
//   ngram_min: 1..16 (default 1)   shortest suffix to look up
//   ngram_max: 1..16 (default 3)   longest suffix to look up; >= ngram_min
//   max_draft: 1..16 (default 8)   most tokens proposed per call (the caller may ask for fewer)
#include <troupe/plugin.h>

#include <algorithm>
#include <string>

#include "plugins/common/plugin_support.h"

namespace {

using namespace troupe::plugin_support;

constexpr const char* source = "spec/ngram";

}  // namespace

struct troupe_plugin_instance {
    int32_t ngram_min = 1;
    int32_t ngram_max = 3;
    int32_t max_draft = 8;
    std::string error;
};

namespace {

// Start of the most recent occurrence of tokens[n - k, n) that begins before n - k, or -1.
int64_t find_earlier(const int32_t* tokens, int64_t n, int32_t k) {
    const int32_t* suffix = tokens + (n - k);
    for (int64_t i = n - k - 1; i >= 0; --i) {
        if (std::equal(suffix, suffix + k, tokens + i)) return i;
    }
    return -1;
}

int32_t ngram_propose(troupe_plugin_instance* inst, const int32_t* tokens, int64_t n, int32_t max_draft, int32_t* out) {
    inst->error.clear();
    if (n < 0 || max_draft < 0 || (n > 0 && tokens == nullptr) || (max_draft > 0 && out == nullptr)) {
        inst->error = "propose got n " + std::to_string(n) + ", max_draft " + std::to_string(max_draft) +
                      " (must be >= 0, with buffers for them)";
        return -TROUPE_ERR_INVALID_ARGUMENT;
    }
    const int32_t limit = std::min(max_draft, inst->max_draft);
    if (limit == 0) return 0;
    for (int32_t k = inst->ngram_max; k >= inst->ngram_min; --k) {
        if (n < static_cast<int64_t>(k) + 1) continue;
        const int64_t at = find_earlier(tokens, n, k);
        if (at < 0) continue;
        const int64_t from = at + k;  // < n, since at < n - k
        const int32_t n_draft = static_cast<int32_t>(std::min<int64_t>(limit, n - from));
        std::copy(tokens + from, tokens + from + n_draft, out);
        return n_draft;
    }
    return 0;
}

int32_t ngram_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    std::string error;
    *out = nullptr;
    const int32_t rc = guarded(error, [&]() -> int32_t {
        param_reader reader(params);
        const auto ngram_min = static_cast<int32_t>(reader.integer("ngram_min", 1, 16, 1));
        const auto ngram_max = static_cast<int32_t>(reader.integer("ngram_max", 1, 16, 3));
        const auto max_draft = static_cast<int32_t>(reader.integer("max_draft", 1, 16, 8));
        if (ngram_min > ngram_max) {
            reader.fail("ngram_min", "must be at most ngram_max (" + std::to_string(ngram_max) + "), got " +
                                         std::to_string(ngram_min));
        }
        if (const std::string& errors = reader.finish({"ngram_min", "ngram_max", "max_draft"}); !errors.empty()) {
            error = errors;
            return TROUPE_ERR_INVALID_PARAMS;
        }
        auto* inst = new troupe_plugin_instance{ngram_min, ngram_max, max_draft, {}};
        host_log::write(TROUPE_LOG_LEVEL_INFO, source, "n-grams %d..%d, up to %d draft tokens", ngram_min, ngram_max,
                        max_draft);
        *out = inst;
        return TROUPE_OK;
    });
    set_create_error(error);
    return rc;
}

void ngram_destroy(troupe_plugin_instance* inst) {
    delete inst;
}

const char* ngram_error_message(const troupe_plugin_instance* inst) {
    return inst != nullptr ? inst->error.c_str() : create_error_buffer();
}

// Pure token bookkeeping: runs wherever the host does.
int32_t ngram_score(int32_t backend) {
    return 50;
}

const troupe_spec_ops ngram_ops = {
    sizeof(troupe_spec_ops), TROUPE_SPEC_OPS_VERSION, ngram_propose, nullptr, nullptr, nullptr, nullptr, nullptr};

const troupe_plugin_descriptor ngram_descriptor = {
    sizeof(troupe_plugin_descriptor),
    TROUPE_PLUGIN_DESCRIPTOR_VERSION,
    TROUPE_PLUGIN_ABI_VERSION,
    TROUPE_PLUGIN_KIND_SPEC,
    "ngram",
    "1.0.0",
    "prompt-lookup drafts: the tokens that followed the latest earlier occurrence of the context's last n-gram",
    ngram_score,
    ngram_create,
    ngram_destroy,
    ngram_error_message,
    nullptr,
    nullptr,
    &ngram_ops,
    nullptr,  // kv
    nullptr,  // quantize
    nullptr,  // taps
};

}  // namespace

extern "C" TROUPE_PLUGIN_EXPORT const troupe_plugin_descriptor* troupe_plugin_query(uint32_t host_abi_min,
                                                                                    uint32_t host_abi_max,
                                                                                    const troupe_host_services* host) {
    host_log::attach(host);
    return &ngram_descriptor;
}
