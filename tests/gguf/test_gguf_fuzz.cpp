// Truncations and seeded random byte flips: every damaged file either opens (and then every tensor can be
// dequantized and described without touching memory outside the file) or gives an error naming the file.
// Files are damaged in place (ftruncate, pwrite) so thousands of cases stay cheap.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <random>

#include "core/gguf/gguf_file.h"
#include "kernels/ref/quants.h"
#include "tests/common/shared_data.h"
#include "tests/gguf/gguf_test_util.h"

namespace troupe::gguf {
namespace {

using troupe::testing::small_model_writer;
using troupe::testing::temp_path;
using troupe::testing::write_file;

bool has_reference(ggml_type t) {
    return t == ggml_type::f32 || t == ggml_type::f16 || t == ggml_type::bf16 || t == ggml_type::q8_0 ||
           t == ggml_type::q4_0 || t == ggml_type::q4_k || t == ggml_type::q6_k || t == ggml_type::q8_k;
}

// Opens path; returns whether it opened. On failure the message must start with the path; on success
// every tensor's bytes are read through the reference dequantizer and the file is described.
bool open_and_use(const std::string& path, const std::string& context) {
    auto f = gguf_file::open(path);
    if (!f.ok()) {
        EXPECT_EQ(f.message().rfind(path + ": ", 0), 0u) << context << ": " << f.message();
        EXPECT_LT(f.message().size(), 600u) << context << ": " << f.message();
        return false;
    }
    std::vector<float> row;
    for (const tensor_info& t : (*f)->tensors()) {
        const size_t begin = (*f)->data_offset() + t.offset;  // byte in the file
        EXPECT_LE(begin + t.n_bytes, (*f)->file_size()) << context << " " << t.name;
        if (!has_reference(t.type) || t.n_elements() > (int64_t{1} << 24)) continue;
        row.resize(static_cast<size_t>(t.dims[0]));
        const size_t rb = row_bytes(t.type, t.dims[0]);
        for (int64_t r = 0; r < t.n_elements() / t.dims[0]; ++r) {
            ref::dequantize_row(t.type, t.data + r * rb, row.data(), t.dims[0]);
        }
    }
    EXPECT_FALSE(describe(**f).empty());
    return true;
}

// The first byte past the last tensor's data: truncating anywhere before it must fail.
size_t required_size(const gguf_file& f) {
    size_t end = f.data_offset();
    for (const tensor_info& t : f.tensors()) end = std::max(end, f.data_offset() + t.offset + t.n_bytes);
    return end;
}

// Truncates a copy of `bytes` at each of `sizes` (in descending order, in place) and checks the outcome.
void check_truncations(const std::vector<uint8_t>& bytes, std::vector<size_t> sizes, const std::string& path) {
    write_file(path, bytes);
    auto whole = gguf_file::open(path);
    ASSERT_TRUE(whole.ok()) << whole.message();
    const size_t required = required_size(**whole);
    std::sort(sizes.rbegin(), sizes.rend());
    for (size_t n : sizes) {
        ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(n)), 0);
        const bool opened = open_and_use(path, "truncated at " + std::to_string(n));
        EXPECT_EQ(opened, n >= required) << "truncated at " << n << " of " << bytes.size();
    }
}

TEST(gguf_fuzz, truncating_a_small_model_at_every_offset_fails_cleanly_until_the_data_is_whole) {
    const std::vector<uint8_t> bytes = small_model_writer().to_bytes();
    std::vector<size_t> sizes(bytes.size());
    for (size_t i = 0; i < sizes.size(); ++i) sizes[i] = i;
    check_truncations(bytes, sizes, temp_path("truncate_small.gguf"));
}

TEST(gguf_fuzz, truncating_stories260k_at_random_offsets_fails_cleanly) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    const std::vector<uint8_t> bytes = troupe::testing::read_file(path);
    std::mt19937_64 rng(260);
    std::vector<size_t> sizes;
    for (int i = 0; i < 200; ++i) sizes.push_back(std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(rng));
    for (int i = 0; i < 100; ++i) sizes.push_back(std::uniform_int_distribution<size_t>(0, 20000)(rng));  // the header
    check_truncations(bytes, sizes, temp_path("truncate_stories.gguf"));
}

// Applies n_cases seeded damages to the file at path, each undone before the next: a byte xor, or a random
// 8-byte window (which forges lengths and counts). Positions are drawn from [0, span).
void check_flips(const std::string& path, size_t span, int n_cases, uint64_t seed) {
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    std::mt19937_64 rng(seed);
    int n_opened = 0;
    for (int i = 0; i < n_cases; ++i) {
        const size_t pos = std::uniform_int_distribution<size_t>(0, span - 1)(rng);
        const size_t len = (i % 4 == 3) ? std::min<size_t>(8, span - pos) : 1;
        uint8_t saved[8], damaged[8];
        ASSERT_EQ(::pread(fd, saved, len, static_cast<off_t>(pos)), static_cast<ssize_t>(len));
        for (size_t j = 0; j < len; ++j) {
            damaged[j] = len == 1 ? static_cast<uint8_t>(saved[j] ^ std::uniform_int_distribution<int>(1, 255)(rng))
                                  : static_cast<uint8_t>(rng());
        }
        ASSERT_EQ(::pwrite(fd, damaged, len, static_cast<off_t>(pos)), static_cast<ssize_t>(len));
        n_opened += open_and_use(path, "case " + std::to_string(i) + " at byte " + std::to_string(pos));
        ASSERT_EQ(::pwrite(fd, saved, len, static_cast<off_t>(pos)), static_cast<ssize_t>(len));
    }
    ::close(fd);
    // Both outcomes occur: the cases reach past the first checks, and not every byte is checked.
    EXPECT_GT(n_opened, n_cases / 20);
    EXPECT_LT(n_opened, n_cases - n_cases / 20);
}

TEST(gguf_fuzz, two_thousand_random_byte_flips_in_a_small_model_never_crash) {
    const std::string path = temp_path("flips_small.gguf");
    const std::vector<uint8_t> bytes = small_model_writer().to_bytes();
    write_file(path, bytes);
    check_flips(path, bytes.size(), 2000, 2000);
}

TEST(gguf_fuzz, random_byte_flips_in_the_header_of_stories260k_never_crash) {
    TROUPE_REQUIRE_SHARED(src, "models/stories260K.gguf");
    auto f = gguf_file::open(src);
    ASSERT_TRUE(f.ok()) << f.message();
    const std::string path = temp_path("flips_stories.gguf");
    write_file(path, troupe::testing::read_file(src));
    check_flips(path, (*f)->data_offset(), 1000, 260);
}

}  // namespace
}  // namespace troupe::gguf
