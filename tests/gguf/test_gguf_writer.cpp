// gguf_writer round trips: every metadata type, every computable tensor type, versions, alignment, and
// metadata copied from another file.
#include <gtest/gtest.h>

#include <cmath>

#include "core/gguf/gguf_writer.h"
#include "kernels/ref/quants.h"
#include "tests/common/shared_data.h"
#include "tests/gguf/gguf_test_util.h"

namespace troupe::gguf {
namespace {

using troupe::testing::small_model_writer;
using troupe::testing::temp_path;

std::shared_ptr<const gguf_file> write_and_open(const gguf_writer& w, const std::string& name) {
    const std::string path = temp_path(name);
    const status s = w.write(path);
    EXPECT_TRUE(s.ok()) << s.message();
    auto f = gguf_file::open(path);
    EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.message());
    return f.ok() ? *f : nullptr;
}

TEST(gguf_writer, every_metadata_type_round_trips_with_its_type_and_value) {
    const gguf_writer w = small_model_writer();
    auto f = write_and_open(w, "types.gguf");
    ASSERT_TRUE(f);
    struct row {
        const char* key;
        scalar value;
    };
    const row rows[] = {
        {"test.u8", uint8_t{200}},
        {"test.i8", int8_t{-100}},
        {"test.u16", uint16_t{60000}},
        {"test.i16", int16_t{-30000}},
        {"test.u32", uint32_t{4000000000u}},
        {"test.i32", int32_t{-2000000000}},
        {"test.f32", 1.5f},
        {"test.bool", true},
        {"test.string", std::string("hello \"gguf\"")},
        {"test.u64", uint64_t{18000000000000000000ull}},
        {"test.i64", int64_t{-9000000000000000000ll}},
        {"test.f64", 2.25},
    };
    for (const row& r : rows) {
        const metadata_value* v = f->find(r.key);
        ASSERT_NE(v, nullptr) << r.key;
        EXPECT_EQ(v->type, scalar_type(r.value)) << r.key;
        ASSERT_EQ(v->elements.size(), 1u);
        EXPECT_EQ(v->elements[0], r.value) << r.key;
    }
    EXPECT_EQ(f->find("test.u8")->type, value_type::u8);
    EXPECT_EQ(f->find("test.f64")->type, value_type::f64);
    EXPECT_EQ(f->keys().front(), "general.architecture");
    EXPECT_EQ(f->keys().size(), w.n_keys());

    const std::vector<std::string> strings = {"<unk>", "<s>", "</s>", "a", "b", "c", "d", "e", "f", "g"};
    EXPECT_EQ(*f->get_string_array("test.strings"), strings);
    EXPECT_EQ(*f->get_float_array("test.floats"), (std::vector<float>{0.5f, -1.0f, 3.0f}));
    EXPECT_EQ(*f->get_int_array("test.ints"), (std::vector<int64_t>{1, -2, 3}));
    EXPECT_EQ(f->find("test.bools")->element_type, value_type::boolean);
    EXPECT_EQ(f->find("test.bools")->elements, (std::vector<scalar>{true, false}));
    EXPECT_EQ(f->find("test.empty")->element_type, value_type::u64);
    EXPECT_TRUE(f->find("test.empty")->elements.empty());
    EXPECT_NE(describe(*f).find("test.strings = [10 strings: \"<unk>\", \"<s>\", \"</s>\", ... ] (array of string)"),
              std::string::npos);
    EXPECT_NE(describe(*f).find("test.floats = [3 f32: 0.5, -1, 3] (array of f32)"), std::string::npos);
}

TEST(gguf_writer, integer_getters_accept_any_integer_type_whose_value_fits) {
    auto f = write_and_open(small_model_writer(), "getters.gguf");
    ASSERT_TRUE(f);
    EXPECT_EQ(*f->get_uint("test.u8"), 200u);
    EXPECT_EQ(*f->get_int("test.i8"), -100);
    EXPECT_EQ(*f->get_uint("test.u64"), 18000000000000000000ull);
    EXPECT_EQ(*f->get_int("test.i64"), -9000000000000000000ll);
    EXPECT_EQ(*f->get_int("test.u32"), 4000000000ll);
    EXPECT_DOUBLE_EQ(*f->get_float("test.i16"), -30000.0);
    EXPECT_DOUBLE_EQ(*f->get_float("test.f64"), 2.25);
    EXPECT_TRUE(*f->get_bool("test.bool"));

    auto negative = f->get_uint("test.i32");
    ASSERT_FALSE(negative.ok());
    EXPECT_NE(negative.message().find("test.i32 is negative"), std::string::npos) << negative.message();
    auto too_big = f->get_int("test.u64");
    ASSERT_FALSE(too_big.ok());
    EXPECT_NE(too_big.message().find("does not fit"), std::string::npos) << too_big.message();
    auto not_bool = f->get_bool("test.u8");
    ASSERT_FALSE(not_bool.ok());
    EXPECT_NE(not_bool.message().find("has type u8, expected bool"), std::string::npos) << not_bool.message();
    EXPECT_FALSE(f->get_int_array("test.floats").ok());
    EXPECT_EQ(f->uint_or("test.string", 7), 7u);
}

TEST(gguf_writer, tensors_of_every_computable_type_keep_their_bytes_shapes_and_aligned_offsets) {
    for (uint32_t alignment : {32u, 64u, 256u}) {
        gguf_writer w = small_model_writer();
        w.set_alignment(alignment);
        const std::vector<uint8_t> bytes = w.to_bytes();
        EXPECT_EQ(bytes.size() % alignment, 0u);
        auto f = write_and_open(w, "tensors" + std::to_string(alignment) + ".gguf");
        ASSERT_TRUE(f);
        EXPECT_EQ(troupe::testing::read_file(f->path()), bytes);
        EXPECT_EQ(f->alignment(), alignment);
        EXPECT_EQ(*f->get_uint("general.alignment"), alignment);
        ASSERT_EQ(f->tensors().size(), 7u);
        const ggml_type expected[] = {ggml_type::f32,  ggml_type::f16,  ggml_type::bf16, ggml_type::q8_0,
                                      ggml_type::q4_0, ggml_type::q4_k, ggml_type::q6_k};
        for (size_t i = 0; i < 7; ++i) {
            const tensor_info& t = f->tensors()[i];
            EXPECT_EQ(t.type, expected[i]);
            EXPECT_EQ(t.offset % alignment, 0u);
            const int64_t row = t.dims[0];
            EXPECT_EQ(t.dims[1], static_cast<int64_t>(i % 3) + 1);
            // Dequantizing the stored bytes gives back the generator's sine values within the type's error.
            std::vector<float> out(static_cast<size_t>(t.n_elements()));
            for (int64_t r = 0; r < t.dims[1]; ++r) {
                ref::dequantize_row(t.type, t.data + r * row_bytes(t.type, row), out.data() + r * row, row);
            }
            float max_err = 0;
            for (size_t j = 0; j < out.size(); ++j) {
                max_err = std::max(max_err, std::fabs(out[j] - std::sin(0.37f * static_cast<float>(j + 11 * i))));
            }
            EXPECT_LT(max_err, 0.2) << traits(t.type).name;
            // The stored bytes are exactly what the quantizer produced.
            std::vector<float> values(out.size());
            for (size_t j = 0; j < values.size(); ++j) values[j] = std::sin(0.37f * static_cast<float>(j + 11 * i));
            std::vector<uint8_t> expected_bytes(t.n_bytes);
            for (int64_t r = 0; r < t.dims[1]; ++r) {
                ref::quantize_row(t.type, values.data() + r * row, expected_bytes.data() + r * row_bytes(t.type, row),
                                  row);
            }
            EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.n_bytes), expected_bytes) << traits(t.type).name;
        }
    }
}

TEST(gguf_writer, version_2_files_read_back_and_report_their_version) {
    gguf_writer w = small_model_writer();
    w.set_version(2);
    auto f = write_and_open(w, "v2.gguf");
    ASSERT_TRUE(f);
    EXPECT_EQ(f->version(), 2u);
    EXPECT_EQ(f->tensors().size(), 7u);
}

TEST(gguf_writer, setting_a_key_again_replaces_it_in_place_and_remove_drops_it) {
    gguf_writer w;
    w.set_u32("a", 1);
    w.set_string("b", "x");
    w.set_u32("a", 2);
    w.remove("b");
    w.set_f32("c", 0.5f);
    auto f = write_and_open(w, "replace.gguf");
    ASSERT_TRUE(f);
    EXPECT_EQ(f->keys(), (std::vector<std::string>{"a", "c"}));
    EXPECT_EQ(*f->get_uint("a"), 2u);
    EXPECT_TRUE(f->tensors().empty());
}

TEST(gguf_writer, copy_metadata_with_a_prefix_copies_the_tokenizer_of_a_vocabulary_file) {
    TROUPE_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
    auto src = gguf_file::open(vocab);
    ASSERT_TRUE(src.ok()) << src.message();
    gguf_writer w;
    w.set_string("general.architecture", "llama");
    w.copy_metadata(**src, "tokenizer.");
    auto f = write_and_open(w, "copied.gguf");
    ASSERT_TRUE(f);
    EXPECT_EQ(*f->get_string_array("tokenizer.ggml.tokens"), *(*src)->get_string_array("tokenizer.ggml.tokens"));
    EXPECT_EQ(*f->get_float_array("tokenizer.ggml.scores"), *(*src)->get_float_array("tokenizer.ggml.scores"));
    EXPECT_TRUE(*f->get_bool("tokenizer.ggml.add_bos_token"));
    EXPECT_EQ(f->find("llama.block_count"), nullptr);
    EXPECT_EQ(f->keys().size(), 1u + 10u);

    gguf_writer all;
    all.copy_metadata(**src);
    auto g = write_and_open(all, "copied_all.gguf");
    ASSERT_TRUE(g);
    EXPECT_EQ(g->keys(), (*src)->keys());
}

}  // namespace
}  // namespace troupe::gguf
