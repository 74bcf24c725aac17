// describe(): the human-readable dump printed by `troupe info FILE`.
//
//   FILE: GGUF v3, alignment 32, 48 tensors, 24 metadata keys, 1185376 bytes
//   metadata:
//     general.architecture = "llama" (string)
//     tokenizer.ggml.tokens = [512 strings: "<unk>", "<s>", "</s>", ... ] (array of string)
//   tensors:
//     name  type  dims  offset  bytes
//   parameters: N in total, B bytes of tensor data
//     F32: T tensors, N parameters, B bytes
#include <cinttypes>
#include <cstdio>
#include <map>

#include "core/gguf/gguf_file.h"

namespace troupe::gguf {
namespace {

constexpr size_t max_shown_string = 80;   // longer strings (chat templates) are cut
constexpr size_t max_shown_elements = 8;  // longer arrays show their first 3 elements
constexpr size_t shown_head = 3;

std::string quoted(const std::string& s) {
    std::string out = "\"";
    const size_t n = std::min(s.size(), max_shown_string);
    for (size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    out += '"';
    if (s.size() > n) out += "... (" + std::to_string(s.size()) + " bytes)";
    return out;
}

std::string scalar_string(const scalar& s) {
    return std::visit(
        [](const auto& v) -> std::string {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::string>) {
                return quoted(v);
            } else if constexpr (std::is_same_v<T, bool>) {
                return v ? "true" : "false";
            } else if constexpr (std::is_floating_point_v<T>) {
                char buf[32];
                std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
                return buf;
            } else {
                return std::to_string(v);
            }
        },
        s);
}

std::string value_string(const metadata_value& v) {
    if (v.type != value_type::array) return scalar_string(v.elements[0]);
    const size_t n = v.elements.size();
    std::string out =
        "[" + std::to_string(n) + " " +
        (v.element_type == value_type::string ? std::string("strings") : std::string(value_type_name(v.element_type))) +
        (n ? ": " : "");
    const size_t shown = n > max_shown_elements ? shown_head : n;
    for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + scalar_string(v.elements[i]);
    if (shown < n) out += ", ... ";
    return out + "]";
}

std::string dims_string(const std::vector<int64_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

struct type_total {
    size_t n_tensors = 0;
    int64_t n_params = 0;
    size_t n_bytes = 0;
};

}  // namespace

std::string describe(const gguf_file& file) {
    std::string out;
    char line[512];
    std::snprintf(line, sizeof line, "%s: GGUF v%u, alignment %zu, %zu tensors, %zu metadata keys, %zu bytes\n",
                  file.path().c_str(), file.version(), file.alignment(), file.tensors().size(), file.keys().size(),
                  file.file_size());
    out += line;

    out += "metadata:\n";
    for (const std::string& key : file.keys()) {
        const metadata_value& v = *file.find(key);
        std::string type(value_type_name(v.type));
        if (v.type == value_type::array) type += " of " + std::string(value_type_name(v.element_type));
        out += "  " + key + " = " + value_string(v) + " (" + type + ")\n";
    }

    size_t name_width = 4;
    for (const tensor_info& t : file.tensors()) name_width = std::min(std::max(name_width, t.name.size()), size_t{64});
    if (file.tensors().empty()) {
        out += "tensors: none\n";
        return out;
    }
    out += "tensors (data section at byte " + std::to_string(file.data_offset()) + "):\n";
    std::snprintf(line, sizeof line, "  %-*s  %-7s  %-22s  %12s  %12s\n", static_cast<int>(name_width), "name", "type",
                  "dims", "offset", "bytes");
    out += line;
    std::map<std::string_view, type_total> totals;
    type_total all;
    for (const tensor_info& t : file.tensors()) {
        const std::string_view type_name = traits(t.type).name;
        std::snprintf(line, sizeof line, "  %-*s  %-7.*s  %-22s  %12" PRIu64 "  %12zu", static_cast<int>(name_width),
                      t.name.c_str(), static_cast<int>(type_name.size()), type_name.data(), dims_string(t.dims).c_str(),
                      t.offset, t.n_bytes);
        out += line;
        out += '\n';  // on its own: a very long name may cut the line
        for (type_total* tt : {&totals[type_name], &all}) {
            tt->n_tensors += 1;
            tt->n_params += t.n_elements();
            tt->n_bytes += t.n_bytes;
        }
    }
    std::snprintf(line, sizeof line, "parameters: %" PRId64 " in total, %zu bytes of tensor data\n", all.n_params,
                  all.n_bytes);
    out += line;
    for (const auto& [name, tt] : totals) {
        std::snprintf(line, sizeof line, "  %-7.*s %5zu tensors, %12" PRId64 " parameters, %12zu bytes\n",
                      static_cast<int>(name.size()), name.data(), tt.n_tensors, tt.n_params, tt.n_bytes);
        out += line;
    }
    return out;
}

}  // namespace troupe::gguf
