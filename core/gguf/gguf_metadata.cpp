// Typed access to GGUF metadata: integer getters accept any integer type whose value fits, float
// getters any numeric type; every error names the file, the key, the type found and the type wanted.
#include <limits>

#include "core/gguf/gguf_file.h"

namespace troupe::gguf {
namespace {

// An integer value as sign and magnitude, so every GGUF integer type fits; nullopt for non-integers.
struct integer_value {
    bool negative;
    uint64_t magnitude;
};

std::optional<integer_value> as_integer(const scalar& s) {
    return std::visit(
        [](const auto& v) -> std::optional<integer_value> {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, float> || std::is_same_v<T, double> ||
                          std::is_same_v<T, std::string>) {
                return std::nullopt;
            } else if constexpr (std::is_signed_v<T>) {
                if (v < 0) return integer_value{true, static_cast<uint64_t>(-(static_cast<__int128>(v)))};
                return integer_value{false, static_cast<uint64_t>(v)};
            } else {
                return integer_value{false, static_cast<uint64_t>(v)};
            }
        },
        s);
}

std::optional<double> as_number(const scalar& s) {
    return std::visit(
        [](const auto& v) -> std::optional<double> {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string>) {
                return std::nullopt;
            } else {
                return static_cast<double>(v);
            }
        },
        s);
}

std::optional<int64_t> as_int64(const scalar& s) {
    const auto v = as_integer(s);
    if (!v) return std::nullopt;
    if (v->negative) {
        if (v->magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + 1) return std::nullopt;
        return static_cast<int64_t>(-static_cast<__int128>(v->magnitude));
    }
    if (v->magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(v->magnitude);
}

std::string type_string(const metadata_value& v) {
    if (v.type == value_type::array) return "array of " + std::string(value_type_name(v.element_type));
    return std::string(value_type_name(v.type));
}

// The scalar value of a key, or an error naming what is missing or wrong.
result<const scalar*> scalar_of(const gguf_file& f, const std::string& key, std::string_view wanted) {
    const metadata_value* v = f.find(key);
    if (!v) return make_error(f.path() + ": metadata key " + key + " is missing");
    if (v->type == value_type::array || v->elements.size() != 1) {
        return make_error(f.path() + ": metadata key " + key + " has type " + type_string(*v) + ", expected " +
                          std::string(wanted));
    }
    return &v->elements[0];
}

result<const metadata_value*> array_of(const gguf_file& f, const std::string& key, std::string_view wanted) {
    const metadata_value* v = f.find(key);
    if (!v) return make_error(f.path() + ": metadata key " + key + " is missing");
    if (v->type != value_type::array) {
        return make_error(f.path() + ": metadata key " + key + " has type " + type_string(*v) + ", expected " +
                          std::string(wanted));
    }
    return v;
}

error wrong_type(const gguf_file& f, const std::string& key, std::string_view wanted) {
    return make_error(f.path() + ": metadata key " + key + " has type " + type_string(*f.find(key)) + ", expected " +
                      std::string(wanted));
}

}  // namespace

result<uint64_t> gguf_file::get_uint(const std::string& key) const {
    auto s = scalar_of(*this, key, "an unsigned integer");
    if (!s) return s.err();
    const auto v = as_integer(**s);
    if (!v) return wrong_type(*this, key, "an unsigned integer");
    if (v->negative) return make_error(path_ + ": metadata key " + key + " is negative, expected an unsigned integer");
    return v->magnitude;
}

result<int64_t> gguf_file::get_int(const std::string& key) const {
    auto s = scalar_of(*this, key, "an integer");
    if (!s) return s.err();
    if (!as_integer(**s)) return wrong_type(*this, key, "an integer");
    const auto v = as_int64(**s);
    if (!v) return make_error(path_ + ": metadata key " + key + " does not fit in a 64-bit signed integer");
    return *v;
}

result<double> gguf_file::get_float(const std::string& key) const {
    auto s = scalar_of(*this, key, "a number");
    if (!s) return s.err();
    const auto v = as_number(**s);
    if (!v) return wrong_type(*this, key, "a number");
    return *v;
}

result<bool> gguf_file::get_bool(const std::string& key) const {
    auto s = scalar_of(*this, key, "bool");
    if (!s) return s.err();
    if (const bool* b = std::get_if<bool>(*s)) return *b;
    return wrong_type(*this, key, "bool");
}

result<std::string> gguf_file::get_string(const std::string& key) const {
    auto s = scalar_of(*this, key, "string");
    if (!s) return s.err();
    if (const std::string* str = std::get_if<std::string>(*s)) return *str;
    return wrong_type(*this, key, "string");
}

result<std::vector<std::string>> gguf_file::get_string_array(const std::string& key) const {
    auto a = array_of(*this, key, "array of string");
    if (!a) return a.err();
    if ((*a)->element_type != value_type::string) return wrong_type(*this, key, "array of string");
    std::vector<std::string> out;
    out.reserve((*a)->elements.size());
    for (const scalar& e : (*a)->elements) out.push_back(std::get<std::string>(e));
    return out;
}

result<std::vector<float>> gguf_file::get_float_array(const std::string& key) const {
    auto a = array_of(*this, key, "array of numbers");
    if (!a) return a.err();
    std::vector<float> out;
    out.reserve((*a)->elements.size());
    for (const scalar& e : (*a)->elements) {
        const auto v = as_number(e);
        if (!v) return wrong_type(*this, key, "array of numbers");
        out.push_back(static_cast<float>(*v));
    }
    return out;
}

result<std::vector<int64_t>> gguf_file::get_int_array(const std::string& key) const {
    auto a = array_of(*this, key, "array of integers");
    if (!a) return a.err();
    std::vector<int64_t> out;
    out.reserve((*a)->elements.size());
    for (size_t i = 0; i < (*a)->elements.size(); ++i) {
        const scalar& e = (*a)->elements[i];
        if (!as_integer(e)) return wrong_type(*this, key, "array of integers");
        const auto v = as_int64(e);
        if (!v) {
            return make_error(path_ + ": metadata key " + key + " element " + std::to_string(i) +
                              " does not fit in a 64-bit signed integer");
        }
        out.push_back(*v);
    }
    return out;
}

uint64_t gguf_file::uint_or(const std::string& key, uint64_t fallback) const {
    auto v = get_uint(key);
    return v ? *v : fallback;
}

double gguf_file::float_or(const std::string& key, double fallback) const {
    auto v = get_float(key);
    return v ? *v : fallback;
}

std::string gguf_file::string_or(const std::string& key, const std::string& fallback) const {
    auto v = get_string(key);
    return v ? *v : fallback;
}

}  // namespace troupe::gguf
