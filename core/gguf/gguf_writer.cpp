// gguf_writer: serializes metadata and tensors in GGUF's little-endian layout (see gguf_writer.h).
#include "core/gguf/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace troupe::gguf {

value_type scalar_type(const scalar& s) {
    // The variant lists the types in GGUF's numbering with the array (9) left out.
    const auto i = static_cast<uint32_t>(s.index());
    return static_cast<value_type>(i < 9 ? i : i + 1);
}

namespace {

class byte_sink {
public:
    explicit byte_sink(std::vector<uint8_t>& out) : out_(out) {}

    template <class T>
    void pod(T v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        out_.insert(out_.end(), p, p + sizeof(T));
    }
    void string(const std::string& s) {
        pod<uint64_t>(s.size());
        out_.insert(out_.end(), s.begin(), s.end());
    }
    void value(const scalar& s) {
        std::visit(
            [this](const auto& v) {
                using T = std::decay_t<decltype(v)>;
                if constexpr (std::is_same_v<T, std::string>) {
                    string(v);
                } else if constexpr (std::is_same_v<T, bool>) {
                    pod<uint8_t>(v ? 1 : 0);
                } else {
                    pod<T>(v);
                }
            },
            s);
    }
    void pad_to(size_t alignment) { out_.resize((out_.size() + alignment - 1) / alignment * alignment, 0); }
    size_t size() const { return out_.size(); }

private:
    std::vector<uint8_t>& out_;
};

size_t align_up(size_t n, size_t a) {
    return (n + a - 1) / a * a;
}

}  // namespace

void gguf_writer::set_alignment(uint32_t alignment) {
    TROUPE_ASSERT(alignment != 0 && (alignment & (alignment - 1)) == 0, "alignment must be a power of two");
    alignment_ = alignment;
    set_scalar("general.alignment", alignment);
}

void gguf_writer::set(const std::string& key, metadata_value value) {
    for (auto& [k, v] : keys_) {
        if (k == key) {
            v = std::move(value);
            return;
        }
    }
    keys_.emplace_back(key, std::move(value));
}

void gguf_writer::set_scalar(const std::string& key, scalar value) {
    const value_type t = scalar_type(value);
    set(key, metadata_value{t, t, {std::move(value)}});
}

void gguf_writer::set_string(const std::string& key, const std::string& value) {
    set_scalar(key, value);
}

void gguf_writer::set_array(const std::string& key, value_type element_type, std::vector<scalar> elements) {
    TROUPE_ASSERT(element_type != value_type::array, "nested arrays are not part of GGUF");
    for (const scalar& e : elements) TROUPE_ASSERT(scalar_type(e) == element_type, key);
    set(key, metadata_value{value_type::array, element_type, std::move(elements)});
}

void gguf_writer::set_string_array(const std::string& key, const std::vector<std::string>& values) {
    set_array(key, value_type::string, std::vector<scalar>(values.begin(), values.end()));
}

void gguf_writer::set_f32_array(const std::string& key, const std::vector<float>& values) {
    set_array(key, value_type::f32, std::vector<scalar>(values.begin(), values.end()));
}

void gguf_writer::set_i32_array(const std::string& key, const std::vector<int32_t>& values) {
    set_array(key, value_type::i32, std::vector<scalar>(values.begin(), values.end()));
}

void gguf_writer::remove(const std::string& key) {
    std::erase_if(keys_, [&](const auto& kv) { return kv.first == key; });
}

void gguf_writer::copy_metadata(const gguf_file& from, std::string_view prefix) {
    for (const std::string& key : from.keys()) {
        if (!key.starts_with(prefix)) continue;
        if (key == "general.alignment") {
            if (!prefix.empty()) continue;
            set_alignment(static_cast<uint32_t>(from.alignment()));
            continue;
        }
        set(key, *from.find(key));
    }
}

void gguf_writer::add_tensor(const std::string& name, ggml_type type, std::vector<int64_t> dims,
                             std::span<const uint8_t> bytes) {
    add_tensor(name, type, std::move(dims), std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

void gguf_writer::add_tensor(const std::string& name, ggml_type type, std::vector<int64_t> dims,
                             std::vector<uint8_t>&& bytes) {
    TROUPE_ASSERT(!dims.empty() && dims.size() <= 4, name);
    int64_t n = 1;
    for (int64_t d : dims) {
        TROUPE_ASSERT(d > 0, name);
        n *= d;
    }
    TROUPE_ASSERT(dims[0] % traits(type).block_size == 0, name + ": row length is not a multiple of the block size");
    TROUPE_ASSERT(bytes.size() == static_cast<size_t>(n / dims[0]) * row_bytes(type, dims[0]),
                  name + ": byte count does not match the shape");
    for (const pending_tensor& t : tensors_) TROUPE_ASSERT(t.name != name, "duplicate tensor " + name);
    tensors_.push_back({name, type, std::move(dims), std::move(bytes)});
}

void gguf_writer::add_tensor_f32(const std::string& name, std::vector<int64_t> dims, std::span<const float> values) {
    const auto* p = reinterpret_cast<const uint8_t*>(values.data());
    add_tensor(name, ggml_type::f32, std::move(dims), std::span<const uint8_t>(p, values.size_bytes()));
}

std::vector<uint8_t> gguf_writer::header_bytes() const {
    std::vector<uint8_t> out;
    byte_sink sink(out);
    out.insert(out.end(), {'G', 'G', 'U', 'F'});
    sink.pod<uint32_t>(version_);
    sink.pod<uint64_t>(tensors_.size());
    sink.pod<uint64_t>(keys_.size());
    for (const auto& [key, v] : keys_) {
        sink.string(key);
        sink.pod<uint32_t>(static_cast<uint32_t>(v.type));
        if (v.type == value_type::array) {
            sink.pod<uint32_t>(static_cast<uint32_t>(v.element_type));
            sink.pod<uint64_t>(v.elements.size());
            for (const scalar& e : v.elements) sink.value(e);
        } else {
            TROUPE_ASSERT(v.elements.size() == 1, key);
            sink.value(v.elements[0]);
        }
    }
    size_t offset = 0;
    for (const pending_tensor& t : tensors_) {
        sink.string(t.name);
        sink.pod<uint32_t>(static_cast<uint32_t>(t.dims.size()));
        for (int64_t d : t.dims) sink.pod<uint64_t>(static_cast<uint64_t>(d));
        sink.pod<uint32_t>(static_cast<uint32_t>(t.type));
        sink.pod<uint64_t>(offset);
        offset = align_up(offset + t.bytes.size(), alignment_);
    }
    sink.pad_to(alignment_);
    return out;
}

std::vector<uint8_t> gguf_writer::to_bytes() const {
    std::vector<uint8_t> out = header_bytes();
    byte_sink sink(out);
    for (const pending_tensor& t : tensors_) {
        out.insert(out.end(), t.bytes.begin(), t.bytes.end());
        sink.pad_to(alignment_);
    }
    return out;
}

status gguf_writer::write(const std::string& path) const {
    // Streams the tensors from where they are held, so writing a model costs no second copy of it.
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) return make_error(path + ": cannot create " + tmp + ": " + std::strerror(errno));
    const std::vector<uint8_t> header = header_bytes();
    bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
    const std::vector<uint8_t> zeros(alignment_, 0);
    for (const pending_tensor& t : tensors_) {
        if (!ok) break;
        const size_t pad = align_up(t.bytes.size(), alignment_) - t.bytes.size();
        ok = std::fwrite(t.bytes.data(), 1, t.bytes.size(), f) == t.bytes.size() &&
             std::fwrite(zeros.data(), 1, pad, f) == pad;
    }
    const int e = errno;
    if (std::fclose(f) != 0 || !ok) {
        std::remove(tmp.c_str());
        return make_error(path + ": cannot write " + tmp + ": " + std::strerror(e));
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::remove(tmp.c_str());
        return make_error(path + ": cannot rename " + tmp + ": " + ec.message());
    }
    return status::success();
}

}  // namespace troupe::gguf
