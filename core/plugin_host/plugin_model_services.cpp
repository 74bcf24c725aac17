#include "core/plugin_host/plugin_model_services.h"

#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "core/gguf/target_fingerprint.h"
#include "core/log/log.h"

// The opaque C handle: one GGUF file (the model, or a side file a plugin opened).
struct troupe_tensor_file {
    std::shared_ptr<const troupe::gguf::gguf_file> file;
};

namespace troupe {
namespace {

thread_local std::string last_error_text;  // the calling thread's last failure, "" when none

int32_t fail(int32_t code, std::string message) {
    last_error_text = std::move(message);
    return code;
}

// Owns the C struct and what its host_ctx points at.
struct model_services_state {
    troupe_model_services c{};
    troupe_tensor_file model;
    std::mutex mutex;
    std::set<troupe_tensor_file*> side_files;       // opened by open_file, not yet closed; guarded by mutex
    std::shared_ptr<plugin_model_runners> runners;  // load_model's models; null: none here
    std::optional<std::string> fingerprint;         // the model's troupe.fingerprint, once asked; guarded by mutex

    ~model_services_state() {
        for (troupe_tensor_file* f : side_files) {
            TROUPE_LOG_WARN("plugin_host", "%s: side file still open when the model was released; closed",
                            f->file->path().c_str());
            delete f;
        }
    }
};

model_services_state* state_of(void* host_ctx) {
    return static_cast<model_services_state*>(host_ctx);
}

// The file behind a handle: the model's, or a side file still open; null (and last_error set) otherwise.
const gguf::gguf_file* file_of(void* host_ctx, const troupe_tensor_file* file, const char* what) {
    model_services_state* s = state_of(host_ctx);
    if (s == nullptr || file == nullptr) {
        fail(TROUPE_ERR_INVALID_ARGUMENT, std::string(what) + ": null host_ctx or file");
        return nullptr;
    }
    if (file == &s->model) return s->model.file.get();
    std::lock_guard<std::mutex> lock(s->mutex);
    if (s->side_files.count(const_cast<troupe_tensor_file*>(file)) == 0) {
        fail(TROUPE_ERR_INVALID_ARGUMENT, std::string(what) + ": the file is not open (closed, or not from open_file)");
        return nullptr;
    }
    return file->file.get();
}

int32_t fill_tensor(const gguf::gguf_file& f, const gguf::tensor_info& t, troupe_tensor* out) {
    if (t.dims.size() > 4) {
        return fail(TROUPE_ERR_UNSUPPORTED, f.path() + ": tensor '" + t.name + "' has " +
                                                std::to_string(t.dims.size()) + " dimensions, at most 4 are described");
    }
    *out = troupe_tensor{};
    out->struct_size = sizeof(troupe_tensor);
    out->version = TROUPE_TENSOR_VERSION;
    out->name = t.name.c_str();
    out->type = static_cast<uint32_t>(t.type);
    out->n_dims = static_cast<int32_t>(t.dims.size());
    for (int i = 0; i < 4; ++i) out->ne[i] = i < out->n_dims ? t.dims[static_cast<size_t>(i)] : 1;
    out->data = t.data;
    out->n_bytes = t.n_bytes;
    return TROUPE_OK;
}

int32_t c_tensor(void* host_ctx, const troupe_tensor_file* file, const char* name, troupe_tensor* out) {
    const gguf::gguf_file* f = file_of(host_ctx, file, "tensor");
    if (f == nullptr) return TROUPE_ERR_INVALID_ARGUMENT;
    if (name == nullptr || out == nullptr) return fail(TROUPE_ERR_INVALID_ARGUMENT, "tensor: null name or out");
    const gguf::tensor_info* t = f->find_tensor(name);
    if (t == nullptr) return fail(TROUPE_ERR_INVALID_ARGUMENT, f->path() + ": no tensor '" + name + "'");
    return fill_tensor(*f, *t, out);
}

int64_t c_n_tensors(void* host_ctx, const troupe_tensor_file* file) {
    const gguf::gguf_file* f = file_of(host_ctx, file, "n_tensors");
    return f != nullptr ? static_cast<int64_t>(f->tensors().size()) : -1;
}

int32_t c_tensor_at(void* host_ctx, const troupe_tensor_file* file, int64_t i, troupe_tensor* out) {
    const gguf::gguf_file* f = file_of(host_ctx, file, "tensor_at");
    if (f == nullptr) return TROUPE_ERR_INVALID_ARGUMENT;
    if (out == nullptr) return fail(TROUPE_ERR_INVALID_ARGUMENT, "tensor_at: null out");
    const auto n = static_cast<int64_t>(f->tensors().size());
    if (i < 0 || i >= n) {
        return fail(TROUPE_ERR_INVALID_ARGUMENT,
                    f->path() + ": tensor index " + std::to_string(i) + " is outside 0.." + std::to_string(n - 1));
    }
    return fill_tensor(*f, f->tensors()[static_cast<size_t>(i)], out);
}

bool is_integer(gguf::value_type t) {
    using v = gguf::value_type;
    switch (t) {
        case v::u8:
        case v::i8:
        case v::u16:
        case v::i16:
        case v::u32:
        case v::i32:
        case v::u64:
        case v::i64:
        case v::boolean:
            return true;
        case v::f32:
        case v::f64:
        case v::string:
        case v::array:
            return false;
    }
    return false;
}

// The metadata value of `key` when it is a scalar of a kind `accepts`; null with last_error set otherwise.
template <class accepts_fn>
const gguf::metadata_value* scalar_of(void* host_ctx, const troupe_tensor_file* file, const char* key, const char* what,
                                      const char* kind, accepts_fn accepts, const gguf::gguf_file** f_out) {
    const gguf::gguf_file* f = file_of(host_ctx, file, what);
    if (f == nullptr) return nullptr;
    if (key == nullptr) {
        fail(TROUPE_ERR_INVALID_ARGUMENT, std::string(what) + ": null key");
        return nullptr;
    }
    const gguf::metadata_value* v = f->find(key);
    if (v == nullptr) {
        fail(TROUPE_ERR_INVALID_ARGUMENT, f->path() + ": no metadata key '" + key + "'");
        return nullptr;
    }
    if (v->type == gguf::value_type::array || !accepts(v->type)) {
        fail(TROUPE_ERR_INVALID_ARGUMENT, f->path() + ": metadata key '" + key + "' is " +
                                              std::string(gguf::value_type_name(v->type)) + ", not " + kind);
        return nullptr;
    }
    *f_out = f;
    return v;
}

int32_t c_metadata_int(void* host_ctx, const troupe_tensor_file* file, const char* key, int64_t* out) {
    const gguf::gguf_file* f = nullptr;
    const auto* v = scalar_of(host_ctx, file, key, "metadata_int", "an integer", is_integer, &f);
    if (v == nullptr) return TROUPE_ERR_INVALID_ARGUMENT;
    if (v->type == gguf::value_type::boolean) {
        *out = std::get<bool>(v->elements[0]) ? 1 : 0;
        return TROUPE_OK;
    }
    const result<int64_t> i = f->get_int(key);  // refuses a u64 above INT64_MAX, naming file and key
    if (!i.ok()) return fail(TROUPE_ERR_INVALID_ARGUMENT, i.message());
    *out = *i;
    return TROUPE_OK;
}

int32_t c_metadata_float(void* host_ctx, const troupe_tensor_file* file, const char* key, double* out) {
    const gguf::gguf_file* f = nullptr;
    auto is_float = [](gguf::value_type t) { return t == gguf::value_type::f32 || t == gguf::value_type::f64; };
    const auto* v = scalar_of(host_ctx, file, key, "metadata_float", "a float", is_float, &f);
    if (v == nullptr) return TROUPE_ERR_INVALID_ARGUMENT;
    const result<double> d = f->get_float(key);
    if (!d.ok()) return fail(TROUPE_ERR_INVALID_ARGUMENT, d.message());
    *out = *d;
    return TROUPE_OK;
}

// The model file's troupe.fingerprint (computed once); null with last_error set when the file has none.
const char* model_fingerprint(model_services_state& s) {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.fingerprint) {
        auto fp = target_fingerprint(*s.model.file);
        if (!fp.ok()) {
            fail(TROUPE_ERR_INVALID_ARGUMENT, s.model.file->path() + ": no troupe.fingerprint: " + fp.message());
            return nullptr;
        }
        s.fingerprint = *fp;
    }
    return s.fingerprint->c_str();
}

int32_t c_metadata_string(void* host_ctx, const troupe_tensor_file* file, const char* key, const char** out) {
    model_services_state* s = state_of(host_ctx);
    if (s != nullptr && file == &s->model && key != nullptr && out != nullptr &&
        std::strcmp(key, "troupe.fingerprint") == 0) {
        const char* fp = model_fingerprint(*s);
        if (fp == nullptr) return TROUPE_ERR_INVALID_ARGUMENT;
        *out = fp;
        return TROUPE_OK;
    }
    const gguf::gguf_file* f = nullptr;
    auto is_string = [](gguf::value_type t) { return t == gguf::value_type::string; };
    const auto* v = scalar_of(host_ctx, file, key, "metadata_string", "a string", is_string, &f);
    if (v == nullptr) return TROUPE_ERR_INVALID_ARGUMENT;
    *out = std::get<std::string>(v->elements[0]).c_str();  // lives in the file object, as long as the file
    return TROUPE_OK;
}

int32_t c_open_file(void* host_ctx, const char* path, troupe_tensor_file** out) {
    model_services_state* s = state_of(host_ctx);
    if (s == nullptr || path == nullptr || out == nullptr) {
        return fail(TROUPE_ERR_INVALID_ARGUMENT, "open_file: null host_ctx, path or out");
    }
    *out = nullptr;
    auto file = gguf::gguf_file::open(path);
    if (!file.ok()) return fail(TROUPE_ERR_INVALID_ARGUMENT, file.message());
    auto* handle = new troupe_tensor_file{*file};
    {
        std::lock_guard<std::mutex> lock(s->mutex);
        s->side_files.insert(handle);
    }
    TROUPE_LOG_DEBUG("plugin_host", "side file %s opened (%zu tensors)", path, (*file)->tensors().size());
    *out = handle;
    return TROUPE_OK;
}

void c_close_file(void* host_ctx, troupe_tensor_file* file) {
    model_services_state* s = state_of(host_ctx);
    if (s == nullptr || file == nullptr || file == &s->model) return;  // the model is not the plugin's to close
    std::lock_guard<std::mutex> lock(s->mutex);
    if (s->side_files.erase(file) == 0) {
        TROUPE_LOG_WARN("plugin_host", "close_file: a file that is not open (closed twice?) was ignored");
        return;
    }
    delete file;
}

// Version 2: the second model, through the loader's plugin_model_runners.
plugin_model_runners* runners_of(void* host_ctx, const char* what) {
    model_services_state* s = state_of(host_ctx);
    if (s == nullptr) {
        fail(TROUPE_ERR_INVALID_ARGUMENT, std::string(what) + ": null host_ctx");
        return nullptr;
    }
    if (!s->runners) {
        fail(TROUPE_ERR_UNSUPPORTED, std::string(what) +
                                         ": this host runs no second model here (the plugin was loaded without the "
                                         "engine's model loader)");
        return nullptr;
    }
    return s->runners.get();
}

int32_t c_load_model(void* host_ctx, const char* path, troupe_model** out) {
    plugin_model_runners* r = runners_of(host_ctx, "load_model");
    if (r == nullptr) return state_of(host_ctx) == nullptr ? TROUPE_ERR_INVALID_ARGUMENT : TROUPE_ERR_UNSUPPORTED;
    if (path == nullptr || out == nullptr) return fail(TROUPE_ERR_INVALID_ARGUMENT, "load_model: null path or out");
    *out = nullptr;
    auto m = r->load(path);
    if (!m.ok()) return fail(TROUPE_ERR_INVALID_ARGUMENT, m.message());
    *out = *m;
    return TROUPE_OK;
}

int32_t c_model_info(void* host_ctx, const troupe_model* model, troupe_model_info* out) {
    plugin_model_runners* r = runners_of(host_ctx, "model_info");
    if (r == nullptr) return TROUPE_ERR_INVALID_ARGUMENT;
    if (model == nullptr || out == nullptr) return fail(TROUPE_ERR_INVALID_ARGUMENT, "model_info: null model or out");
    *out = troupe_model_info{};
    out->struct_size = sizeof(troupe_model_info);
    out->version = TROUPE_MODEL_INFO_VERSION;
    if (status st = r->info(model, *out); !st.ok()) return fail(TROUPE_ERR_INVALID_ARGUMENT, st.message());
    return TROUPE_OK;
}

int32_t c_model_forward(void* host_ctx, troupe_model* model, const troupe_model_step* steps, int32_t n_steps,
                        float* logits) {
    plugin_model_runners* r = runners_of(host_ctx, "model_forward");
    if (r == nullptr) return TROUPE_ERR_INVALID_ARGUMENT;
    if (model == nullptr || n_steps < 0 || (n_steps > 0 && (steps == nullptr || logits == nullptr))) {
        return fail(TROUPE_ERR_INVALID_ARGUMENT, "model_forward: null model, steps or logits, or n_steps < 0");
    }
    status st = r->forward(model, std::span<const troupe_model_step>(steps, static_cast<size_t>(n_steps)), logits);
    if (!st.ok()) return fail(TROUPE_ERR_INVALID_ARGUMENT, st.message());
    return TROUPE_OK;
}

void c_unload_model(void* host_ctx, troupe_model* model) {
    model_services_state* s = state_of(host_ctx);
    if (s == nullptr || !s->runners || model == nullptr) return;
    s->runners->unload(model);
}

const char* c_last_error(void* host_ctx) {
    return last_error_text.c_str();
}

}  // namespace

std::shared_ptr<const troupe_model_services> make_model_services(std::shared_ptr<const gguf::gguf_file> model,
                                                                 std::shared_ptr<plugin_model_runners> runners) {
    auto state = std::make_shared<model_services_state>();
    state->model.file = std::move(model);
    state->runners = std::move(runners);
    troupe_model_services& c = state->c;
    c.struct_size = sizeof(troupe_model_services);
    c.version = TROUPE_MODEL_SERVICES_VERSION;
    c.host_ctx = state.get();
    c.model = &state->model;
    c.tensor = c_tensor;
    c.n_tensors = c_n_tensors;
    c.tensor_at = c_tensor_at;
    c.metadata_int = c_metadata_int;
    c.metadata_float = c_metadata_float;
    c.metadata_string = c_metadata_string;
    c.open_file = c_open_file;
    c.close_file = c_close_file;
    c.last_error = c_last_error;
    c.load_model = c_load_model;
    c.model_info = c_model_info;
    c.model_forward = c_model_forward;
    c.unload_model = c_unload_model;
    return std::shared_ptr<const troupe_model_services>(state, &state->c);  // aliasing: owns the whole state
}

}  // namespace troupe
