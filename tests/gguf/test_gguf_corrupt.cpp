// Malformed GGUF files, one named defect each: the reader returns one error naming the file, the field
// (key or tensor name) and the byte offset, with the exact text checked.
#include <gtest/gtest.h>

#include <functional>

#include "core/gguf/gguf_file.h"
#include "tests/gguf/gguf_test_util.h"

namespace troupe::gguf {
namespace {

using troupe::testing::find_bytes;
using troupe::testing::find_tensor_info;
using troupe::testing::patch;
using troupe::testing::small_model_writer;
using troupe::testing::temp_path;
using troupe::testing::write_file;

// Position of a key's u32 type field in a writer's output (the key is found with its length prefix).
size_t key_type_at(const std::vector<uint8_t>& bytes, const std::string& key) {
    std::string needle(8, '\0');
    const uint64_t n = key.size();
    std::memcpy(needle.data(), &n, 8);
    return find_bytes(bytes, needle + key) + 8 + key.size();
}

struct corruption {
    const char* name;
    std::function<void(std::vector<uint8_t>&)> mutate;
    // The message after "<path>: ", computed from the unmutated bytes.
    std::function<std::string(const std::vector<uint8_t>&)> expected;
};

std::string at(size_t n) {
    return ", at byte " + std::to_string(n) + ")";
}

TEST(gguf_corrupt, each_named_defect_gives_one_error_with_file_field_and_byte) {
    const std::vector<uint8_t> good = small_model_writer().to_bytes();
    using bytes_t = std::vector<uint8_t>;
    const corruption cases[] = {
        {"bad_magic", [](bytes_t& b) { std::memcpy(b.data(), "GGML", 4); },
         [](const bytes_t&) { return "bad magic \"GGML\", expected \"GGUF\": not a GGUF file (header.magic" + at(0); }},
        {"version_1", [](bytes_t& b) { patch<uint32_t>(b, 4, 1); },
         [](const bytes_t&) { return "version 1 is not supported (2 and 3 are) (header.version" + at(4); }},
        {"version_99", [](bytes_t& b) { patch<uint32_t>(b, 4, 99); },
         [](const bytes_t&) { return "version 99 is not supported (2 and 3 are) (header.version" + at(4); }},
        {"big_endian", [](bytes_t& b) { patch<uint32_t>(b, 4, 0x03000000); },
         [](const bytes_t&) {
             return "version 50331648 is not supported (2 and 3 are); the file looks big-endian (header.version" +
                    at(4);
         }},
        {"empty_file", [](bytes_t& b) { b.clear(); },
         [](const bytes_t&) {
             return "file is truncated: the magic needs 4 bytes, 0 in the file (header.magic" + at(0);
         }},
        {"huge_key_count", [](bytes_t& b) { patch<uint64_t>(b, 16, 1000000000000ull); },
         [](const bytes_t& b) {
             return "metadata count 1000000000000 cannot fit in the " + std::to_string(b.size() - 24) +
                    " bytes left (header.n_kv" + at(16);
         }},
        {"huge_tensor_count", [](bytes_t& b) { patch<uint64_t>(b, 8, 1ull << 40); },
         [](const bytes_t& b) {
             return "tensor count 1099511627776 cannot fit in the " + std::to_string(b.size() - 24) +
                    " bytes left (header.n_tensors" + at(8);
         }},
        {"unknown_value_type", [](bytes_t& b) { patch<uint32_t>(b, key_type_at(b, "test.u8"), 13); },
         [](const bytes_t& b) { return "unknown value type 13 (test.u8" + at(key_type_at(b, "test.u8")); }},
        {"nested_array", [](bytes_t& b) { patch<uint32_t>(b, key_type_at(b, "test.ints") + 4, 9); },
         [](const bytes_t& b) {
             return "nested arrays are not supported (test.ints" + at(key_type_at(b, "test.ints") + 4);
         }},
        {"unknown_element_type", [](bytes_t& b) { patch<uint32_t>(b, key_type_at(b, "test.ints") + 4, 42); },
         [](const bytes_t& b) {
             return "unknown array element type 42 (test.ints" + at(key_type_at(b, "test.ints") + 4);
         }},
        {"array_longer_than_file", [](bytes_t& b) { patch<uint64_t>(b, key_type_at(b, "test.ints") + 8, 1ull << 20); },
         [](const bytes_t& b) {
             const size_t count_at = key_type_at(b, "test.ints") + 8;
             return "array of 1048576 i32 cannot fit in the " + std::to_string(b.size() - count_at - 8) +
                    " bytes left (test.ints" + at(count_at);
         }},
        {"array_over_the_element_limit",
         [](bytes_t& b) { patch<uint64_t>(b, key_type_at(b, "test.ints") + 8, 1ull << 40); },
         [](const bytes_t& b) {
             return "array of 1099511627776 elements exceeds the limit of 16777216 metadata array elements per "
                    "file (test.ints" +
                    at(key_type_at(b, "test.ints") + 8);
         }},
        {"bool_byte_2", [](bytes_t& b) { b[key_type_at(b, "test.bool") + 4] = 2; },
         [](const bytes_t& b) {
             return "boolean byte 2 is neither 0 nor 1 (test.bool" + at(key_type_at(b, "test.bool") + 4);
         }},
        {"string_past_end", [](bytes_t& b) { patch<uint64_t>(b, key_type_at(b, "test.string") + 4, 1ull << 33); },
         [](const bytes_t& b) {
             const size_t len_at = key_type_at(b, "test.string") + 4;
             return "string length 8589934592 runs past the end of the file (" + std::to_string(b.size() - len_at - 8) +
                    " bytes left) (test.string" + at(len_at);
         }},
        {"duplicate_key", [](bytes_t& b) { b[key_type_at(b, "test.i16") - 3] = 'u'; },
         [](const bytes_t& b) { return "duplicate key \"test.u16\" (test.u16" + at(key_type_at(b, "test.i16") - 16); }},
        {"alignment_not_power_of_two",
         [](bytes_t& b) { patch<uint32_t>(b, key_type_at(b, "general.alignment") + 4, 24); },
         [](const bytes_t& b) {
             return "alignment 24 is not a power of two (general.alignment" +
                    at(key_type_at(b, "general.alignment") + 4);
         }},
        {"alignment_of_wrong_type", [](bytes_t& b) { patch<uint32_t>(b, key_type_at(b, "general.alignment"), 5); },
         [](const bytes_t& b) {
             return "general.alignment has type i32, expected u32 (general.alignment" +
                    at(key_type_at(b, "general.alignment") + 4);
         }},
        {"five_dims", [](bytes_t& b) { patch<uint32_t>(b, find_tensor_info(b, "tensor.f32", 2).n_dims, 5); },
         [](const bytes_t& b) {
             return "n_dims 5 is outside 1..4 (tensor.f32" + at(find_tensor_info(b, "tensor.f32", 2).n_dims);
         }},
        {"zero_dims", [](bytes_t& b) { patch<uint32_t>(b, find_tensor_info(b, "tensor.f32", 2).n_dims, 0); },
         [](const bytes_t& b) {
             return "n_dims 0 is outside 1..4 (tensor.f32" + at(find_tensor_info(b, "tensor.f32", 2).n_dims);
         }},
        {"dimension_zero", [](bytes_t& b) { patch<uint64_t>(b, find_tensor_info(b, "tensor.f32", 2).dims + 8, 0); },
         [](const bytes_t& b) {
             return "dimension 1 (0) is zero (tensor.f32" + at(find_tensor_info(b, "tensor.f32", 2).dims + 8);
         }},
        {"dimension_overflow",
         [](bytes_t& b) { patch<uint64_t>(b, find_tensor_info(b, "tensor.f32", 2).dims + 8, 1ull << 58); },
         [](const bytes_t& b) {
             return "dimension 1 (288230376151711744) makes the element count overflow (tensor.f32" +
                    at(find_tensor_info(b, "tensor.f32", 2).dims + 8);
         }},
        {"unknown_tensor_type", [](bytes_t& b) { patch<uint32_t>(b, find_tensor_info(b, "tensor.q8_0", 2).type, 77); },
         [](const bytes_t& b) {
             return "unknown tensor type 77 (tensor.q8_0" + at(find_tensor_info(b, "tensor.q8_0", 2).type);
         }},
        {"row_not_a_block_multiple",
         [](bytes_t& b) { patch<uint32_t>(b, find_tensor_info(b, "tensor.f32", 2).type, 12); },
         [](const bytes_t& b) {
             return "row length 64 is not a multiple of the Q4_K block size 256 (tensor.f32" +
                    at(find_tensor_info(b, "tensor.f32", 2).type);
         }},
        {"duplicate_tensor",
         [](bytes_t& b) {
             const size_t name = find_tensor_info(b, "tensor.f16", 2).name + 8;  // rename it tensor.f32
             b[name + 8] = '3';
             b[name + 9] = '2';
         },
         [](const bytes_t& b) {
             return "duplicate tensor name (tensor.f32" + at(find_tensor_info(b, "tensor.f16", 2).name);
         }},
    };
    for (const corruption& c : cases) {
        std::vector<uint8_t> bad = good;
        c.mutate(bad);
        const std::string path = temp_path(std::string(c.name) + ".gguf");
        write_file(path, bad);
        auto f = gguf_file::open(path);
        ASSERT_FALSE(f.ok()) << c.name << " was accepted";
        EXPECT_EQ(f.message(), path + ": " + c.expected(good)) << c.name;
    }
}

TEST(gguf_corrupt, tensor_data_out_of_bounds_or_misaligned_is_refused_with_the_tensor_name) {
    const std::vector<uint8_t> good = small_model_writer().to_bytes();
    write_file(temp_path("good.gguf"), good);
    auto ok = gguf_file::open(temp_path("good.gguf"));
    ASSERT_TRUE(ok.ok()) << ok.message();
    const tensor_info& last = (*ok)->tensors().back();
    ASSERT_EQ(last.name, "tensor.q6_k");
    const size_t data_start = (*ok)->data_offset();
    const auto fields = find_tensor_info(good, "tensor.q6_k", 2);

    std::vector<uint8_t> far = good;
    patch<uint64_t>(far, fields.offset, last.offset + 1024);
    const std::string far_path = temp_path("far.gguf");
    write_file(far_path, far);
    auto f = gguf_file::open(far_path);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.message(), far_path + ": tensor data (210 bytes at data offset " + std::to_string(last.offset + 1024) +
                               ", data section at byte " + std::to_string(data_start) +
                               ") runs past the end of the file (" + std::to_string(good.size()) +
                               " bytes) (tensor.q6_k" + at(fields.offset));

    std::vector<uint8_t> wrapped = good;
    patch<uint64_t>(wrapped, fields.offset, ~uint64_t{31});  // aligned, and data_start + offset wraps around
    const std::string wrapped_path = temp_path("wrapped.gguf");
    write_file(wrapped_path, wrapped);
    auto w = gguf_file::open(wrapped_path);
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.message().find("runs past the end of the file"), std::string::npos) << w.message();

    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<ptrdiff_t>(data_start + last.offset + 200));
    const std::string cut_path = temp_path("cut.gguf");
    write_file(cut_path, cut);
    auto c = gguf_file::open(cut_path);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(
        c.message().find(") runs past the end of the file (" + std::to_string(cut.size()) + " bytes) (tensor.q6_k"),
        std::string::npos)
        << c.message();

    const auto f16 = find_tensor_info(good, "tensor.f16", 2);
    std::vector<uint8_t> misaligned = good;
    uint64_t off;
    std::memcpy(&off, good.data() + f16.offset, 8);
    patch<uint64_t>(misaligned, f16.offset, off + 2);
    const std::string mis_path = temp_path("misaligned.gguf");
    write_file(mis_path, misaligned);
    auto m = gguf_file::open(mis_path);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.message(), mis_path + ": data offset " + std::to_string(off + 2) +
                               " is not a multiple of the alignment 32 (tensor.f16" + at(f16.offset));
}

TEST(gguf_corrupt, missing_tensor_and_wrong_shape_are_reported_by_tensor_lookup) {
    const std::string path = temp_path("lookup.gguf");
    ASSERT_TRUE(small_model_writer().write(path).ok());
    auto f = gguf_file::open(path);
    ASSERT_TRUE(f.ok()) << f.message();
    const int64_t dims[] = {64, 2};
    EXPECT_TRUE((*f)->tensor("tensor.f16", dims).ok());
    const int64_t wrong[] = {64, 3, 1};
    EXPECT_EQ((*f)->tensor("tensor.f16", wrong).message(),
              path + ": tensor tensor.f16 has shape [64, 2], expected [64, 3, 1]");
    EXPECT_EQ((*f)->tensor("tensor.q5_k", dims).message(), path + ": tensor tensor.q5_k is missing");
}

TEST(gguf_corrupt, files_that_cannot_be_opened_name_the_path_and_the_reason) {
    const std::string missing = temp_path("does-not-exist.gguf");
    auto f = gguf_file::open(missing);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.message(), missing + ": cannot open: No such file or directory");
    const std::string dir = temp_path("");
    auto d = gguf_file::open(dir);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.message(), dir + ": not a regular file");
}

}  // namespace
}  // namespace troupe::gguf
