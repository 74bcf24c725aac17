/* spec/repeat: an example plugin, built out of troupe's tree against the installed SDK (CMakeLists.txt).
 *
 * Drafts by repetition: when the context ends with a pattern of p tokens that also comes right before it
 * (tokens[n-2p, n-p) == tokens[n-p, n), the smallest such p up to params.max_period), it proposes that pattern
 * again, repeated up to max_draft tokens. "a b c a b c" -> "a b c a ..."; nothing when the context does not end
 * in a repeat. The core verifies every draft, so a wrong guess only costs time.
 *
 * Parameters: max_period (1..64, default 4). It logs its settings at create and how many drafts it made at
 * destroy, through the host's log. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <troupe/plugin.h>

static const troupe_host_services* host; /* from troupe_plugin_query; valid while the library is loaded */

struct troupe_plugin_instance {
    int32_t max_period;
    int64_t n_calls;  /* propose calls */
    int64_t n_drafts; /* calls that proposed something */
    char error[256];
};

static char create_error[256];

static void log_line(int32_t level, const char* message) {
    if (host != NULL && host->log != NULL) host->log(host->host_ctx, level, "spec/repeat", message);
}

static int32_t repeat_create(const troupe_plugin_params* params, troupe_plugin_instance** out) {
    int32_t max_period = 4;
    size_t i;
    char line[128];
    *out = NULL;
    create_error[0] = '\0';
    for (i = 0; i < params->n_items; ++i) {
        const char* key = params->items[i].key;
        const char* value = params->items[i].value;
        if (strcmp(key, "max_period") == 0) {
            char* end = NULL;
            const long v = strtol(value, &end, 10);
            if (end == value || *end != '\0' || v < 1 || v > 64) {
                snprintf(create_error, sizeof create_error, "params.max_period: must be between 1 and 64, got '%s'",
                         value);
                return TROUPE_ERR_INVALID_PARAMS;
            }
            max_period = (int32_t)v;
        } else {
            snprintf(create_error, sizeof create_error, "params.%s: unknown key (valid keys: max_period)", key);
            return TROUPE_ERR_INVALID_PARAMS;
        }
    }
    *out = (troupe_plugin_instance*)calloc(1, sizeof **out);
    if (*out == NULL) {
        strcpy(create_error, "out of memory");
        return TROUPE_ERR_OUT_OF_MEMORY;
    }
    (*out)->max_period = max_period;
    snprintf(line, sizeof line, "repeats patterns of up to %d tokens (built out of tree, ABI %u)", max_period,
             (unsigned)TROUPE_PLUGIN_ABI_VERSION);
    log_line(TROUPE_LOG_LEVEL_INFO, line);
    return TROUPE_OK;
}

static void repeat_destroy(troupe_plugin_instance* instance) {
    char line[128];
    snprintf(line, sizeof line, "%lld propose calls, %lld with a draft", (long long)instance->n_calls,
             (long long)instance->n_drafts);
    log_line(TROUPE_LOG_LEVEL_INFO, line);
    free(instance);
}

static const char* repeat_error_message(const troupe_plugin_instance* instance) {
    return instance != NULL ? instance->error : create_error;
}

/* Whether tokens[n-2p, n-p) == tokens[n-p, n). */
static int ends_with_repeat(const int32_t* tokens, int64_t n, int32_t p) {
    return 2 * (int64_t)p <= n && memcmp(tokens + n - 2 * p, tokens + n - p, sizeof(int32_t) * (size_t)p) == 0;
}

static int32_t repeat_propose(troupe_plugin_instance* instance, const int32_t* tokens, int64_t n, int32_t max_draft,
                              int32_t* out) {
    int32_t p, i;
    instance->error[0] = '\0';
    if (n < 0 || max_draft < 0 || (n > 0 && tokens == NULL) || (max_draft > 0 && out == NULL)) {
        strcpy(instance->error, "propose: negative count or null buffer");
        return -TROUPE_ERR_INVALID_ARGUMENT;
    }
    ++instance->n_calls;
    for (p = 1; p <= instance->max_period; ++p) {
        if (!ends_with_repeat(tokens, n, p)) continue;
        for (i = 0; i < max_draft; ++i) out[i] = tokens[n - p + i % p];
        if (max_draft > 0) ++instance->n_drafts;
        return max_draft;
    }
    return 0;
}

static int32_t repeat_score(int32_t backend) {
    return backend == TROUPE_BACKEND_CPU ? 10 : -1; /* host-side token lists: the CPU */
}

static const troupe_spec_ops ops = {
    .struct_size = sizeof(troupe_spec_ops),
    .version = TROUPE_SPEC_OPS_VERSION,
    .propose = repeat_propose,
};

static const troupe_plugin_descriptor descriptor = {
    .struct_size = sizeof(troupe_plugin_descriptor),
    .version = TROUPE_PLUGIN_DESCRIPTOR_VERSION,
    .abi_version = TROUPE_PLUGIN_ABI_VERSION,
    .kind = TROUPE_PLUGIN_KIND_SPEC,
    .name = "repeat",
    .plugin_version = "1.0.0",
    .description = "drafts by repeating the pattern the context ends with",
    .score = repeat_score,
    .create = repeat_create,
    .destroy = repeat_destroy,
    .error_message = repeat_error_message,
    .spec = &ops,
};

TROUPE_PLUGIN_EXPORT const troupe_plugin_descriptor* troupe_plugin_query(uint32_t host_abi_min, uint32_t host_abi_max,
                                                                         const troupe_host_services* services) {
    (void)host_abi_min, (void)host_abi_max;
    host = services;
    return &descriptor;
}
