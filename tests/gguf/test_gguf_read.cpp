// The GGUF reader on the real files in ../shared: known metadata, tensor tables, types, and dequantized
// quantized tensors compared with the float versions of the same models.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/gguf/gguf_file.h"
#include "kernels/ref/quants.h"
#include "tests/common/shared_data.h"

namespace troupe::gguf {
namespace {

std::shared_ptr<const gguf_file> open_ok(const std::string& path) {
    auto f = gguf_file::open(path);
    EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.message());
    return f.ok() ? *f : nullptr;
}

std::vector<float> dequantize(const tensor_info& t) {
    std::vector<float> out(static_cast<size_t>(t.n_elements()));
    const int64_t row = t.dims[0];
    const size_t rb = row_bytes(t.type, row);
    for (int64_t r = 0; r < t.n_elements() / row; ++r) {
        ref::dequantize_row(t.type, t.data + r * rb, out.data() + r * row, row);
    }
    return out;
}

// Largest |a - b| relative to the largest |a|.
double max_relative_error(const std::vector<float>& a, const std::vector<float>& b) {
    double err = 0, amax = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
        amax = std::max(amax, std::fabs(static_cast<double>(a[i])));
    }
    return err / amax;
}

TEST(gguf_read, stories260k_has_its_known_hyperparameters_vocabulary_and_tensors) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto f = open_ok(path);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_EQ(f->tensors().size(), 48u);
    EXPECT_EQ(*f->get_string("general.architecture"), "llama");
    EXPECT_EQ(*f->get_uint("llama.block_count"), 5u);
    EXPECT_EQ(*f->get_int("llama.embedding_length"), 64);
    EXPECT_EQ(f->uint_or("llama.attention.head_count_kv", 0), 4u);
    EXPECT_NEAR(*f->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-10);
    auto tokens = f->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok());
    ASSERT_EQ(tokens->size(), 512u);
    EXPECT_EQ((*tokens)[0], "<unk>");
    EXPECT_EQ((*tokens)[1], "<s>");
    EXPECT_EQ(f->get_float_array("tokenizer.ggml.scores")->size(), 512u);
    EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type")->at(0), 2);

    const int64_t dims[] = {64, 512};
    auto t = f->tensor("token_embd.weight", dims);
    ASSERT_TRUE(t.ok()) << t.message();
    EXPECT_EQ((*t)->type, ggml_type::f32);
    EXPECT_EQ((*t)->n_bytes, 64u * 512u * 4u);
    EXPECT_EQ((*t)->offset, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*t)->data) % 32, 0u);
    float first;
    std::memcpy(&first, (*t)->data, 4);
    EXPECT_TRUE(std::isfinite(first));
    EXPECT_NE(first, 0.0f);
}

TEST(gguf_read, quantized_stories260k_variants_store_the_documented_types) {
    struct row {
        const char* file;
        ggml_type attn_q;
        ggml_type ffn_down;
    };
    const row rows[] = {
        {"models/stories260K-F16.gguf", ggml_type::f16, ggml_type::f16},
        {"models/stories260K-Q8_0.gguf", ggml_type::q8_0, ggml_type::f16},
        {"models/stories260K-Q4_0.gguf", ggml_type::q4_0, ggml_type::f16},
    };
    for (const row& r : rows) {
        TROUPE_REQUIRE_SHARED(path, r.file);
        auto f = open_ok(path);
        ASSERT_TRUE(f);
        EXPECT_EQ(f->find_tensor("blk.0.attn_q.weight")->type, r.attn_q) << r.file;
        EXPECT_EQ(f->find_tensor("blk.4.ffn_down.weight")->type, r.ffn_down) << r.file;
        EXPECT_EQ(f->find_tensor("output_norm.weight")->type, ggml_type::f32) << r.file;
    }
}

TEST(gguf_read, rand10m_q4_k_m_mixes_q4_k_and_q6_k_and_q4_0_keeps_a_q6_k_output) {
    TROUPE_REQUIRE_SHARED(km, "models/rand10M-Q4_K_M.gguf");
    TROUPE_REQUIRE_SHARED(q40, "models/rand10M-Q4_0.gguf");
    auto f = open_ok(km);
    ASSERT_TRUE(f);
    size_t n_q4_k = 0, n_q6_k = 0;
    for (const tensor_info& t : f->tensors()) {
        n_q4_k += t.type == ggml_type::q4_k;
        n_q6_k += t.type == ggml_type::q6_k;
    }
    EXPECT_EQ(n_q4_k, 13u);
    EXPECT_EQ(n_q6_k, 3u);
    EXPECT_EQ(*f->get_uint("llama.embedding_length"), 256u);
    auto g = open_ok(q40);
    ASSERT_TRUE(g);
    EXPECT_EQ(g->find_tensor("output.weight")->type, ggml_type::q6_k);
    EXPECT_EQ(g->find_tensor("blk.0.attn_q.weight")->type, ggml_type::q4_0);
}

TEST(gguf_read, every_shared_file_opens_with_tensors_inside_the_file_and_not_overlapping) {
    const char* files[] = {
        "models/stories260K.gguf",      "models/stories260K-F16.gguf",     "models/stories260K-Q8_0.gguf",
        "models/stories260K-Q4_0.gguf", "models/llama-2-tiny-random.gguf", "models/rand10M-F16.gguf",
        "models/rand10M-Q8_0.gguf",     "models/rand10M-Q4_0.gguf",        "models/rand10M-Q4_K_M.gguf",
        "models/rand10M-Q6_K.gguf",     "vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-gpt-2.gguf",
    };
    for (const char* file : files) {
        TROUPE_REQUIRE_SHARED(path, file);
        auto f = open_ok(path);
        ASSERT_TRUE(f) << file;
        std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges;
        for (const tensor_info& t : f->tensors()) {
            ASSERT_NE(t.data, nullptr) << file << " " << t.name;
            ranges.emplace_back(t.data, t.data + t.n_bytes);
            EXPECT_EQ(t.n_bytes, static_cast<size_t>(t.n_elements() / t.dims[0]) * row_bytes(t.type, t.dims[0]));
        }
        std::sort(ranges.begin(), ranges.end());
        for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first) << file;
        EXPECT_FALSE(describe(*f).empty());
    }
}

TEST(gguf_read, vocabulary_files_hold_their_tokenizers) {
    TROUPE_REQUIRE_SHARED(spm, "vocab/ggml-vocab-llama-spm.gguf");
    TROUPE_REQUIRE_SHARED(bpe, "vocab/ggml-vocab-gpt-2.gguf");
    auto s = open_ok(spm);
    auto b = open_ok(bpe);
    ASSERT_TRUE(s && b);
    EXPECT_EQ(s->get_string_array("tokenizer.ggml.tokens")->size(), 32000u);
    EXPECT_TRUE(*s->get_bool("tokenizer.ggml.add_bos_token"));
    EXPECT_EQ(*b->get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(b->get_string_array("tokenizer.ggml.merges")->size(), 50000u);
    EXPECT_EQ(b->get_string_array("tokenizer.ggml.merges")->at(0), "\xc4\xa0 t");
    EXPECT_TRUE(b->tensors().empty());
    const std::string d = describe(*b);
    EXPECT_NE(d.find("tokenizer.ggml.merges = [50000 strings: \"\xc4\xa0 t\", \"\xc4\xa0 a\", \"h e\", ... ]"),
              std::string::npos)
        << d;
    EXPECT_NE(d.find("\ntensors: none\n"), std::string::npos) << d;
}

TEST(gguf_read, describe_prints_header_metadata_abbreviated_arrays_tensor_table_and_totals) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K-Q8_0.gguf");
    auto f = open_ok(path);
    ASSERT_TRUE(f);
    const std::string d = describe(*f);
    EXPECT_NE(d.find("GGUF v3, alignment 32, 48 tensors, 20 metadata keys, 379136 bytes"), std::string::npos) << d;
    EXPECT_NE(d.find("llama.block_count = 5 (u32)"), std::string::npos);
    EXPECT_NE(d.find("general.architecture = \"llama\" (string)"), std::string::npos);
    EXPECT_NE(d.find("tokenizer.ggml.tokens = [512 strings: \"<unk>\", \"<s>\", \"</s>\", ... ] (array of string)"),
              std::string::npos)
        << d;
    EXPECT_NE(d.find("blk.0.attn_q.weight"), std::string::npos);
    EXPECT_NE(d.find("[64, 64]"), std::string::npos);
    EXPECT_NE(d.find("parameters: 292800 in total"), std::string::npos) << d;
    EXPECT_NE(d.find("Q8_0       32 tensors,       237056 parameters,       251872 bytes"), std::string::npos) << d;
}

TEST(gguf_read, typed_getters_name_the_file_and_key_when_missing_or_of_another_type) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto f = open_ok(path);
    ASSERT_TRUE(f);
    auto missing = f->get_uint("llama.rope.freq_base");
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.message(), path + ": metadata key llama.rope.freq_base is missing");
    auto wrong = f->get_uint("general.architecture");
    ASSERT_FALSE(wrong.ok());
    EXPECT_EQ(wrong.message(),
              path + ": metadata key general.architecture has type string, expected an unsigned integer");
    EXPECT_FALSE(f->get_string("tokenizer.ggml.tokens").ok());
    EXPECT_FALSE(f->get_string_array("tokenizer.ggml.scores").ok());
    EXPECT_EQ(f->float_or("llama.rope.freq_base", 10000.0), 10000.0);
    EXPECT_EQ(f->string_or("general.name", "x"), "llama");
}

TEST(gguf_read, tensor_lookup_reports_missing_tensors_and_wrong_shapes) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto f = open_ok(path);
    ASSERT_TRUE(f);
    const int64_t wrong[] = {64, 60};
    auto w = f->tensor("blk.3.attn_q.weight", wrong);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.message(), path + ": tensor blk.3.attn_q.weight has shape [64, 64], expected [64, 60]");
    auto m = f->tensor("blk.9.attn_q.weight", wrong);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.message(), path + ": tensor blk.9.attn_q.weight is missing");
    EXPECT_EQ(f->find_tensor("nope"), nullptr);
}

// The quantized files were made by llama.cpp from the same weights: dequantizing them must land near the
// float weights, which checks our block layouts against an independent writer.
TEST(gguf_read, dequantized_tensors_match_the_float_model_within_the_format_error) {
    struct row {
        const char* quantized;
        const char* reference;
        const char* tensor;
        ggml_type type;
        double tolerance;  // max |error| relative to max |w|
    };
    const row rows[] = {
        {"models/stories260K-Q8_0.gguf", "models/stories260K.gguf", "blk.1.attn_q.weight", ggml_type::q8_0, 0.01},
        {"models/stories260K-Q4_0.gguf", "models/stories260K.gguf", "blk.1.attn_q.weight", ggml_type::q4_0, 0.15},
        {"models/stories260K-F16.gguf", "models/stories260K.gguf", "blk.1.ffn_down.weight", ggml_type::f16, 0.001},
        {"models/rand10M-Q8_0.gguf", "models/rand10M-F16.gguf", "blk.0.ffn_up.weight", ggml_type::q8_0, 0.01},
        {"models/rand10M-Q4_K_M.gguf", "models/rand10M-F16.gguf", "blk.0.attn_q.weight", ggml_type::q4_k, 0.15},
        {"models/rand10M-Q6_K.gguf", "models/rand10M-F16.gguf", "blk.1.ffn_down.weight", ggml_type::q6_k, 0.04},
        {"models/rand10M-Q4_0.gguf", "models/rand10M-F16.gguf", "output.weight", ggml_type::q6_k, 0.04},
    };
    for (const row& r : rows) {
        TROUPE_REQUIRE_SHARED(qpath, r.quantized);
        TROUPE_REQUIRE_SHARED(fpath, r.reference);
        auto q = open_ok(qpath);
        auto f = open_ok(fpath);
        ASSERT_TRUE(q && f);
        const tensor_info* qt = q->find_tensor(r.tensor);
        const tensor_info* ft = f->find_tensor(r.tensor);
        ASSERT_TRUE(qt && ft) << r.tensor;
        ASSERT_EQ(qt->type, r.type) << r.quantized;
        ASSERT_EQ(qt->dims, ft->dims);
        const double err = max_relative_error(dequantize(*ft), dequantize(*qt));
        EXPECT_LT(err, r.tolerance) << r.quantized << " " << r.tensor;
        EXPECT_GT(err, 0.0) << r.quantized << " " << r.tensor << " is not actually quantized";
    }
}

}  // namespace
}  // namespace troupe::gguf
