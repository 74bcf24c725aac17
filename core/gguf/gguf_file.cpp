// gguf_file: maps a GGUF file read-only and validates it in one forward pass (gguf_reader below).
//
// Every read goes through need(), which checks the byte range against the mapping before touching it,
// so a truncated or corrupted file yields an error value naming the file, the field and the byte
// offset, never a read past the mapping. The first error is sticky: later reads return zeros and
// loops stop, so one clear message comes back. Counts are checked against the bytes left before any
// allocation, so a forged count cannot make us allocate more than a small multiple of the file size.
#include "core/gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <new>
#include <set>

#include "core/log/log.h"

namespace troupe::gguf {

std::string_view value_type_name(value_type t) {
    switch (t) {
        case value_type::u8:
            return "u8";
        case value_type::i8:
            return "i8";
        case value_type::u16:
            return "u16";
        case value_type::i16:
            return "i16";
        case value_type::u32:
            return "u32";
        case value_type::i32:
            return "i32";
        case value_type::f32:
            return "f32";
        case value_type::boolean:
            return "bool";
        case value_type::string:
            return "string";
        case value_type::array:
            return "array";
        case value_type::u64:
            return "u64";
        case value_type::i64:
            return "i64";
        case value_type::f64:
            return "f64";
    }
    return "?";
}

int64_t tensor_info::n_elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

namespace {

// Smallest encoded size of one value of a type (a string is at least its u64 length).
size_t min_encoded_size(value_type t) {
    switch (t) {
        case value_type::u8:
        case value_type::i8:
        case value_type::boolean:
            return 1;
        case value_type::u16:
        case value_type::i16:
            return 2;
        case value_type::u32:
        case value_type::i32:
        case value_type::f32:
            return 4;
        case value_type::u64:
        case value_type::i64:
        case value_type::f64:
        case value_type::string:
            return 8;
        case value_type::array:
            return 12;
    }
    return 1;
}

// Each array element is held as a `scalar` (40 bytes), so a forged count in a large file could ask for
// many times the file's size: the sum of array lengths is capped far above real vocabularies (~10^6).
constexpr uint64_t max_array_elements = uint64_t{1} << 24;

bool is_known_value_type(uint32_t t) {
    return t <= static_cast<uint32_t>(value_type::f64);
}

// Printable form of raw bytes for messages: ASCII as is, the rest as \xNN.
std::string printable(const uint8_t* p, size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) {
        if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\') {
            s += static_cast<char>(p[i]);
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", p[i]);
            s += buf;
        }
    }
    return s;
}

// A key or tensor name as it appears in messages: printable, at most 80 bytes of it.
std::string shown_name(const std::string& name) {
    constexpr size_t max_shown = 80;
    const auto* p = reinterpret_cast<const uint8_t*>(name.data());
    std::string s = printable(p, std::min(name.size(), max_shown));
    if (name.size() > max_shown) s += "... (" + std::to_string(name.size()) + " bytes)";
    return s;
}

std::string dims_string(std::span<const int64_t> dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

}  // namespace

// The one-pass parser; a friend of gguf_file so it fills the private members directly.
class gguf_reader {
public:
    gguf_reader(gguf_file& f) : f_(f) {}

    status parse() {
        parse_header();
        for (uint64_t i = 0; i < n_kv_ && ok(); ++i) parse_kv(i);
        if (ok()) parse_alignment();
        for (uint64_t i = 0; i < n_tensors_ && ok(); ++i) parse_tensor_info(i);
        if (ok()) check_tensor_data();
        if (err_) return *err_;
        return status::success();
    }

private:
    bool ok() const { return !err_; }

    // Records the first error. Field names come from the file, so they are shown printable and cut short.
    void fail(const std::string& what, const std::string& field, size_t at) {
        if (err_) return;
        err_ = make_error(f_.path_ + ": " + what + " (" + shown_name(field) + ", at byte " + std::to_string(at) + ")");
    }

    size_t left() const { return f_.size_ - pos_; }

    // True when n bytes can be read at pos_; otherwise records a truncation error.
    bool need(size_t n, std::string_view what, const std::string& field) {
        if (err_) return false;
        if (n > left()) {
            fail("file is truncated: " + std::string(what) + " needs " + std::to_string(n) + " bytes, " +
                     std::to_string(left()) + " left",
                 field, pos_);
            return false;
        }
        return true;
    }

    template <class T>
    T read(std::string_view what, const std::string& field) {
        T v{};
        if (!need(sizeof(T), what, field)) return v;
        std::memcpy(&v, f_.base_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string read_string(const std::string& field) {
        const size_t at = pos_;
        const uint64_t n = read<uint64_t>("a string length", field);
        if (!ok()) return {};
        if (n > left()) {
            fail("string length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(left()) +
                     " bytes left)",
                 field, at);
            return {};
        }
        std::string s(reinterpret_cast<const char*>(f_.base_ + pos_), n);
        pos_ += n;
        return s;
    }

    void parse_header() {
        if (f_.size_ < 4) {
            fail("file is truncated: the magic needs 4 bytes, " + std::to_string(f_.size_) + " in the file",
                 "header.magic", 0);
            return;
        }
        if (std::memcmp(f_.base_, "GGUF", 4) != 0) {
            fail("bad magic \"" + printable(f_.base_, 4) + "\", expected \"GGUF\": not a GGUF file", "header.magic", 0);
            return;
        }
        pos_ = 4;
        const uint32_t version = read<uint32_t>("the version", "header.version");
        if (!ok()) return;
        if (version != 2 && version != 3) {
            std::string what = "version " + std::to_string(version) + " is not supported (2 and 3 are)";
            if (version >= 0x10000 && (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3)) {
                what += "; the file looks big-endian";
            }
            fail(what, "header.version", 4);
            return;
        }
        f_.version_ = version;
        n_tensors_ = read<uint64_t>("the tensor count", "header.n_tensors");
        n_kv_ = read<uint64_t>("the metadata count", "header.n_kv");
        if (!ok()) return;
        // A key/value needs >= 8 (key length) + 1 (key) + 4 (type) + 1 (value) bytes; a tensor info
        // >= 8 + 1 (name) + 4 (n_dims) + 8 (a dim) + 4 (type) + 8 (offset).
        if (n_kv_ > left() / 14) {
            fail("metadata count " + std::to_string(n_kv_) + " cannot fit in the " + std::to_string(left()) +
                     " bytes left",
                 "header.n_kv", 16);
        } else if (n_tensors_ > left() / 33) {
            fail("tensor count " + std::to_string(n_tensors_) + " cannot fit in the " + std::to_string(left()) +
                     " bytes left",
                 "header.n_tensors", 8);
        }
    }

    scalar read_scalar(value_type t, const std::string& field) {
        switch (t) {
            case value_type::u8:
                return read<uint8_t>("a u8", field);
            case value_type::i8:
                return read<int8_t>("an i8", field);
            case value_type::u16:
                return read<uint16_t>("a u16", field);
            case value_type::i16:
                return read<int16_t>("an i16", field);
            case value_type::u32:
                return read<uint32_t>("a u32", field);
            case value_type::i32:
                return read<int32_t>("an i32", field);
            case value_type::f32:
                return read<float>("an f32", field);
            case value_type::u64:
                return read<uint64_t>("a u64", field);
            case value_type::i64:
                return read<int64_t>("an i64", field);
            case value_type::f64:
                return read<double>("an f64", field);
            case value_type::string:
                return read_string(field);
            case value_type::boolean: {
                const size_t at = pos_;
                const uint8_t b = read<uint8_t>("a bool", field);
                if (b > 1) fail("boolean byte " + std::to_string(b) + " is neither 0 nor 1", field, at);
                return b == 1;
            }
            case value_type::array:
                TROUPE_ASSERT(false, "arrays are read by parse_kv");
        }
        return uint8_t{0};
    }

    void parse_kv(uint64_t i) {
        const size_t key_at = pos_;
        const std::string key_field = "key of metadata #" + std::to_string(i);
        std::string key = read_string(key_field);
        if (!ok()) return;
        if (key.empty()) return fail("empty key", key_field, key_at);
        if (f_.kv_.count(key)) return fail("duplicate key \"" + shown_name(key) + "\"", key, key_at);
        const size_t type_at = pos_;
        const uint32_t type = read<uint32_t>("a value type", key);
        if (!ok()) return;
        if (!is_known_value_type(type)) return fail("unknown value type " + std::to_string(type), key, type_at);

        metadata_value v{static_cast<value_type>(type), static_cast<value_type>(type), {}};
        if (key == "general.alignment") alignment_at_ = pos_;
        if (v.type == value_type::array) {
            const size_t elem_at = pos_;
            const uint32_t elem = read<uint32_t>("an array element type", key);
            const size_t count_at = pos_;
            const uint64_t count = read<uint64_t>("an array length", key);
            if (!ok()) return;
            if (!is_known_value_type(elem))
                return fail("unknown array element type " + std::to_string(elem), key, elem_at);
            v.element_type = static_cast<value_type>(elem);
            if (v.element_type == value_type::array) return fail("nested arrays are not supported", key, elem_at);
            if (count > max_array_elements - n_elements_) {
                return fail("array of " + std::to_string(count) + " elements exceeds the limit of " +
                                std::to_string(max_array_elements) + " metadata array elements per file",
                            key, count_at);
            }
            n_elements_ += count;
            if (count > left() / min_encoded_size(v.element_type)) {
                return fail("array of " + std::to_string(count) + " " + std::string(value_type_name(v.element_type)) +
                                " cannot fit in the " + std::to_string(left()) + " bytes left",
                            key, count_at);
            }
            v.elements.reserve(count);
            for (uint64_t j = 0; j < count && ok(); ++j) v.elements.push_back(read_scalar(v.element_type, key));
        } else {
            v.elements.push_back(read_scalar(v.type, key));
        }
        if (!ok()) return;
        f_.key_order_.push_back(key);
        f_.kv_.emplace(std::move(key), std::move(v));
    }

    void parse_alignment() {
        const metadata_value* v = f_.find("general.alignment");
        if (!v) return;
        if (v->type != value_type::u32) {
            return fail("general.alignment has type " + std::string(value_type_name(v->type)) + ", expected u32",
                        "general.alignment", alignment_at_);
        }
        const uint32_t a = std::get<uint32_t>(v->elements[0]);
        if (a == 0 || (a & (a - 1)) != 0) {
            return fail("alignment " + std::to_string(a) + " is not a power of two", "general.alignment",
                        alignment_at_);
        }
        f_.alignment_ = a;
    }

    void parse_tensor_info(uint64_t i) {
        const size_t name_at = pos_;
        const std::string name_field = "name of tensor #" + std::to_string(i);
        tensor_info t{};
        t.name = read_string(name_field);
        if (!ok()) return;
        if (t.name.empty()) return fail("empty tensor name", name_field, name_at);
        if (f_.tensor_index_.count(t.name)) return fail("duplicate tensor name", t.name, name_at);
        const std::string& field = t.name;

        const size_t n_dims_at = pos_;
        const uint32_t n_dims = read<uint32_t>("n_dims", field);
        if (!ok()) return;
        if (n_dims < 1 || n_dims > 4)
            return fail("n_dims " + std::to_string(n_dims) + " is outside 1..4", field, n_dims_at);
        int64_t n_elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const size_t dim_at = pos_;
            const uint64_t dim = read<uint64_t>("a dimension", field);
            if (!ok()) return;
            const std::string which = "dimension " + std::to_string(d) + " (" + std::to_string(dim) + ")";
            if (dim == 0) return fail(which + " is zero", field, dim_at);
            if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
                __builtin_mul_overflow(n_elements, static_cast<int64_t>(dim), &n_elements)) {
                return fail(which + " makes the element count overflow", field, dim_at);
            }
            t.dims.push_back(static_cast<int64_t>(dim));
        }

        const size_t type_at = pos_;
        const uint32_t type = read<uint32_t>("a tensor type", field);
        if (!ok()) return;
        const auto tr = type_traits(type);
        if (!tr) return fail("unknown tensor type " + std::to_string(type), field, type_at);
        t.type = static_cast<ggml_type>(type);
        if (t.dims[0] % tr->block_size != 0) {
            return fail("row length " + std::to_string(t.dims[0]) + " is not a multiple of the " +
                            std::string(tr->name) + " block size " + std::to_string(tr->block_size),
                        field, type_at);
        }
        const uint64_t n_rows = static_cast<uint64_t>(n_elements / t.dims[0]);
        const uint64_t row = static_cast<uint64_t>(t.dims[0] / tr->block_size) * tr->type_size;
        uint64_t n_bytes = 0;
        if (__builtin_mul_overflow(n_rows, row, &n_bytes)) {
            return fail("data size overflows for shape " + dims_string(t.dims), field, type_at);
        }
        t.n_bytes = n_bytes;

        offset_at_.push_back(pos_);
        t.offset = read<uint64_t>("a data offset", field);
        if (!ok()) return;
        f_.tensor_index_.emplace(t.name, f_.tensors_.size());
        f_.tensors_.push_back(std::move(t));
    }

    void check_tensor_data() {
        const size_t a = f_.alignment_;
        const uint64_t data_start = (static_cast<uint64_t>(pos_) + a - 1) / a * a;
        f_.data_offset_ = data_start;
        for (size_t i = 0; i < f_.tensors_.size(); ++i) {
            tensor_info& t = f_.tensors_[i];
            if (t.offset % a != 0) {
                return fail("data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                                std::to_string(a),
                            t.name, offset_at_[i]);
            }
            uint64_t begin = 0, end = 0;
            if (__builtin_add_overflow(data_start, t.offset, &begin) ||
                __builtin_add_overflow(begin, static_cast<uint64_t>(t.n_bytes), &end) || end > f_.size_) {
                return fail("tensor data (" + std::to_string(t.n_bytes) + " bytes at data offset " +
                                std::to_string(t.offset) + ", data section at byte " + std::to_string(data_start) +
                                ") runs past the end of the file (" + std::to_string(f_.size_) + " bytes)",
                            t.name, offset_at_[i]);
            }
            t.data = f_.base_ + begin;
        }
    }

    gguf_file& f_;
    size_t pos_ = 0;
    uint64_t n_tensors_ = 0;
    uint64_t n_kv_ = 0;
    size_t alignment_at_ = 0;
    uint64_t n_elements_ = 0;        // metadata array elements so far, against max_array_elements
    std::vector<size_t> offset_at_;  // [n_tensors] byte position of each tensor's offset field
    std::optional<error> err_;
};

result<std::shared_ptr<const gguf_file>> gguf_file::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return make_error(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        return make_error(path + ": cannot stat: " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return make_error(path + ": not a regular file");
    }
    std::shared_ptr<gguf_file> f(new gguf_file());
    f->path_ = path;
    f->size_ = static_cast<size_t>(st.st_size);
    if (f->size_ > 0) {
        void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int e = errno;
            ::close(fd);
            return make_error(path + ": cannot map " + std::to_string(f->size_) + " bytes: " + std::strerror(e));
        }
        f->base_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);  // the mapping keeps the file alive

    gguf_reader reader(*f);
    status s;
    try {
        s = reader.parse();
    } catch (const std::bad_alloc&) {  // the edge where a file's counts meet the allocator
        return make_error(path + ": out of memory while reading the metadata and tensor table");
    }
    if (!s) return s.err();
    TROUPE_LOG_DEBUG("gguf", "%s: GGUF v%u, %zu tensors, %zu keys, %zu bytes", path.c_str(), f->version_,
                     f->tensors_.size(), f->key_order_.size(), f->size_);
    return std::shared_ptr<const gguf_file>(std::move(f));
}

gguf_file::~gguf_file() {
    if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

const metadata_value* gguf_file::find(const std::string& key) const {
    const auto it = kv_.find(key);
    return it == kv_.end() ? nullptr : &it->second;
}

const tensor_info* gguf_file::find_tensor(const std::string& name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

result<const tensor_info*> gguf_file::tensor(const std::string& name, std::span<const int64_t> expected_dims) const {
    const tensor_info* t = find_tensor(name);
    if (!t) return make_error(path_ + ": tensor " + name + " is missing");
    if (!std::equal(t->dims.begin(), t->dims.end(), expected_dims.begin(), expected_dims.end())) {
        return make_error(path_ + ": tensor " + name + " has shape " + dims_string(t->dims) + ", expected " +
                          dims_string(expected_dims));
    }
    return t;
}

}  // namespace troupe::gguf
