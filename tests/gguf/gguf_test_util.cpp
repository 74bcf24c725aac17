#include "tests/gguf/gguf_test_util.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/result.h"
#include "kernels/ref/quants.h"

namespace troupe::testing {
namespace {

struct temp_dir {
    std::filesystem::path path;
    temp_dir() {
        path = std::filesystem::temp_directory_path() / ("troupe_gguf_test_" + std::to_string(::getpid()));
        std::filesystem::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

}  // namespace

std::string temp_path(const std::string& name) {
    static temp_dir dir;
    return (dir.path / name).string();
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    TROUPE_ASSERT(out.good(), "cannot write " + path);
}

std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    TROUPE_ASSERT(in.good(), "cannot read " + path);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

size_t find_bytes(const std::vector<uint8_t>& bytes, std::string_view needle) {
    const auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
    TROUPE_ASSERT(it != bytes.end(), "bytes not found: " + std::string(needle));
    return static_cast<size_t>(it - bytes.begin());
}

tensor_info_fields find_tensor_info(const std::vector<uint8_t>& bytes, const std::string& name, uint32_t n_dims) {
    // The name is preceded by its u64 length; search for length + name to skip mentions in metadata.
    std::string needle(8, '\0');
    const uint64_t n = name.size();
    std::memcpy(needle.data(), &n, 8);
    needle += name;
    tensor_info_fields f{};
    f.name = find_bytes(bytes, needle);
    f.n_dims = f.name + 8 + name.size();
    f.dims = f.n_dims + 4;
    f.type = f.dims + 8 * n_dims;
    f.offset = f.type + 4;
    return f;
}

gguf::gguf_writer small_model_writer() {
    using gguf::scalar;
    using gguf::value_type;
    gguf::gguf_writer w;
    w.set_string("general.architecture", "llama");
    w.set_scalar("test.u8", uint8_t{200});
    w.set_scalar("test.i8", int8_t{-100});
    w.set_scalar("test.u16", uint16_t{60000});
    w.set_scalar("test.i16", int16_t{-30000});
    w.set_scalar("test.u32", uint32_t{4000000000u});
    w.set_scalar("test.i32", int32_t{-2000000000});
    w.set_scalar("test.f32", 1.5f);
    w.set_scalar("test.bool", true);
    w.set_string("test.string", "hello \"gguf\"");
    w.set_scalar("test.u64", uint64_t{18000000000000000000ull});
    w.set_scalar("test.i64", int64_t{-9000000000000000000ll});
    w.set_scalar("test.f64", 2.25);
    w.set_string_array("test.strings", {"<unk>", "<s>", "</s>", "a", "b", "c", "d", "e", "f", "g"});
    w.set_f32_array("test.floats", {0.5f, -1.0f, 3.0f});
    w.set_i32_array("test.ints", {1, -2, 3});
    w.set_array("test.bools", value_type::boolean, {scalar{true}, scalar{false}});
    w.set_array("test.empty", value_type::u64, {});
    w.set_alignment(32);

    const ggml_type types[] = {ggml_type::f32,  ggml_type::f16,  ggml_type::bf16, ggml_type::q8_0,
                               ggml_type::q4_0, ggml_type::q4_k, ggml_type::q6_k};
    for (size_t t = 0; t < std::size(types); ++t) {
        const int64_t row = types[t] == ggml_type::q4_k || types[t] == ggml_type::q6_k ? 256 : 64;
        const int64_t rows = static_cast<int64_t>(t % 3) + 1;
        std::vector<float> values(static_cast<size_t>(row * rows));
        for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.37f * static_cast<float>(i + 11 * t));
        std::vector<uint8_t> bytes(static_cast<size_t>(rows) * row_bytes(types[t], row));
        for (int64_t r = 0; r < rows; ++r) {
            ref::quantize_row(types[t], values.data() + r * row, bytes.data() + r * row_bytes(types[t], row), row);
        }
        std::string name = "tensor." + std::string(traits(types[t]).name);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (t % 2 == 0) {
            w.add_tensor(name, types[t], {row, rows}, bytes);  // the copying overload
        } else {
            w.add_tensor(name, types[t], {row, rows}, std::move(bytes));  // the moving one
        }
    }
    return w;
}

}  // namespace troupe::testing
