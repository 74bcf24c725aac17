// The device layouts of the quant plugins' CUDA paths, host side (no GPU needed, built everywhere): the w4a16
// repacking gives every weight's stored 4-bit code and its group's (d, m) at the place the device decode reads
// (w4a16_cuda_layout.h), and the fp8 rows hold the panel form's codes with zero padding (fp8_cuda_layout.h).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "plugins/quant/fp8/fp8_cuda_layout.h"
#include "plugins/quant/w4a16/w4a16_cuda_layout.h"

namespace troupe {
namespace {

TEST(cuda_quant_layout, w4a16_repacking_puts_every_stored_code_and_scale_where_the_device_reads_it) {
    struct layout_case {
        int g;
        int64_t n_in, n_out;
        size_t row_padding;  // bytes after each stored row
    };
    const std::vector<layout_case> cases = {{32, 32, 1, 0},  {32, 96, 5, 3},   {64, 64, 3, 0},
                                            {64, 384, 7, 1}, {128, 128, 2, 0}, {128, 1152, 3, 5}};
    std::mt19937 rng(7);
    for (const layout_case& c : cases) {
        const std::string what =
            "G " + std::to_string(c.g) + " [" + std::to_string(c.n_out) + ", " + std::to_string(c.n_in) + "]";
        const size_t block = w4a16::block_bytes(c.g),
                     stride = static_cast<size_t>(c.n_in / c.g) * block + c.row_padding;
        std::vector<uint8_t> stored(stride * static_cast<size_t>(c.n_out));
        for (uint8_t& b : stored) b = static_cast<uint8_t>(rng());
        const troupe_weight w{sizeof(troupe_weight), TROUPE_WEIGHT_VERSION, 0, stored.data(), c.n_in, c.n_out, stride};
        std::vector<uint8_t> codes(static_cast<size_t>(c.n_out * c.n_in / 2), 0xaa);
        std::vector<uint8_t> scales(static_cast<size_t>(c.n_out * (c.n_in / c.g)) * 4, 0xaa);
        // In two ranges of rows, as the host's pool would split them.
        w4a16_cuda::pack_rows(&w, c.g, codes.data(), scales.data(), 0, c.n_out / 2);
        w4a16_cuda::pack_rows(&w, c.g, codes.data(), scales.data(), c.n_out / 2, c.n_out);
        int failures = 0;
        for (int64_t r = 0; r < c.n_out; ++r) {
            for (int64_t k = 0; k < c.n_in && failures < 5; ++k) {
                const uint8_t* blk =
                    stored.data() + static_cast<size_t>(r) * stride + static_cast<size_t>(k / c.g) * block;
                const int j = static_cast<int>(k % c.g);
                const int expected = j < c.g / 2 ? blk[4 + j] & 15 : blk[4 + j - c.g / 2] >> 4;
                const int got = w4a16_cuda::device_code(codes.data(), c.n_in, r, k);
                if (got != expected) {
                    ADD_FAILURE() << what << ": weight [" << r << ", " << k << "] code " << got << ", stored "
                                  << expected;
                    ++failures;
                }
            }
            for (int64_t b = 0; b < c.n_in / c.g; ++b) {
                EXPECT_EQ(
                    0, std::memcmp(scales.data() + static_cast<size_t>(r * (c.n_in / c.g) + b) * 4,
                                   stored.data() + static_cast<size_t>(r) * stride + static_cast<size_t>(b) * block, 4))
                    << what << ": (d, m) of row " << r << " group " << b;
            }
        }
    }
}

TEST(cuda_quant_layout, fp8_rows_hold_the_panel_forms_codes_padded_with_zeros) {
    struct layout_case {
        int64_t n_in, n_out;
    };
    const std::vector<layout_case> cases = {{1, 1}, {17, 33}, {32, 32}, {100, 70}, {520, 3}};
    for (const layout_case& c : cases) {
        const int64_t rows = fp8_panels::panel_rows;
        const int64_t n_panels = (c.n_out + rows - 1) / rows;
        auto code_of = [](int64_t r, int64_t k) { return static_cast<uint8_t>(1 + (r * 7 + k * 13) % 254); };
        std::vector<uint8_t> panel_codes(static_cast<size_t>(n_panels * c.n_in * rows), 0);
        for (int64_t r = 0; r < c.n_out; ++r) {  // fp8_panels.h: panel r / rows, step k, lane r % rows
            for (int64_t k = 0; k < c.n_in; ++k) {
                panel_codes[static_cast<size_t>(((r / rows) * c.n_in + k) * rows + r % rows)] = code_of(r, k);
            }
        }
        fp8_panels::matrix m;
        m.n_in = c.n_in;
        m.n_out = c.n_out;
        m.n_panels = n_panels;
        m.codes = panel_codes.data();
        const int64_t stride = fp8_cuda::row_codes(c.n_in);
        ASSERT_EQ(stride % 32, 0);
        ASSERT_GE(stride, c.n_in);
        std::vector<uint8_t> codes(static_cast<size_t>(stride * c.n_out), 0xaa);
        fp8_cuda::rows_from_panels(m, codes.data());
        for (int64_t r = 0; r < c.n_out; ++r) {
            for (int64_t k = 0; k < stride; ++k) {
                const uint8_t expected = k < c.n_in ? code_of(r, k) : 0;
                ASSERT_EQ(codes[static_cast<size_t>(r * stride + k)], expected)
                    << "[" << c.n_out << ", " << c.n_in << "]: row " << r << " code " << k;
            }
        }
    }
}

}  // namespace
}  // namespace troupe
