// The shared tokenizer test vectors (llama.cpp's format) and the models' own vocabularies.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "core/gguf/gguf_file.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// .inp: the inputs, each followed by "\n__ggml_vocab_test__\n" (so an input may be empty or be newlines).
std::vector<std::string> read_inputs(const std::string& path) {
    const std::string text = read_all(path);
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> inputs;
    size_t start = 0;
    for (size_t at = text.find(sep); at != std::string::npos; at = text.find(sep, start)) {
        inputs.push_back(text.substr(start, at - start));
        start = at + sep.size();
    }
    EXPECT_EQ(start, text.size()) << "trailing text after the last separator in " << path;
    return inputs;
}

// .out: one line of space-separated ids per input.
std::vector<std::vector<int32_t>> read_outputs(const std::string& path) {
    std::ifstream in(path);
    std::vector<std::vector<int32_t>> outputs;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::vector<int32_t> ids;
        int32_t id;
        while (ls >> id) ids.push_back(id);
        outputs.push_back(std::move(ids));
    }
    return outputs;
}

std::shared_ptr<const tokenizer> load(const std::string& path) {
    auto file = gguf::gguf_file::open(path);
    EXPECT_TRUE(file.ok()) << (file.ok() ? "" : file.message());
    if (!file) return nullptr;
    auto tok = tokenizer::from_gguf(**file);
    EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.message());
    return tok ? *tok : nullptr;
}

std::string show(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += " " + std::to_string(id);
    return s;
}

void check_vectors(const std::string& gguf_path, size_t expected_cases) {
    auto tok = load(gguf_path);
    ASSERT_NE(tok, nullptr);
    const auto inputs = read_inputs(gguf_path + ".inp");
    const auto outputs = read_outputs(gguf_path + ".out");
    ASSERT_EQ(inputs.size(), outputs.size());
    ASSERT_EQ(inputs.size(), expected_cases);
    for (size_t i = 0; i < inputs.size(); ++i) {
        const std::vector<int32_t> ids = tok->encode(inputs[i], false, false);
        EXPECT_EQ(ids, outputs[i]) << "case " << i << " '" << inputs[i] << "'\n got:" << show(ids)
                                   << "\nwant:" << show(outputs[i]);
    }
}

TEST(tokenizer_vectors, llama_spm_vocabulary_encodes_every_case_as_the_reference) {
    TROUPE_REQUIRE_SHARED(path, "vocab/ggml-vocab-llama-spm.gguf");
    check_vectors(path, 46);
}

TEST(tokenizer_vectors, gpt2_vocabulary_encodes_every_case_as_the_reference) {
    TROUPE_REQUIRE_SHARED(path, "vocab/ggml-vocab-gpt-2.gguf");
    check_vectors(path, 46);
}

TEST(tokenizer_vectors, vocabularies_report_their_model_pre_tokenizer_and_special_ids) {
    TROUPE_REQUIRE_SHARED(spm_path, "vocab/ggml-vocab-llama-spm.gguf");
    TROUPE_REQUIRE_SHARED(bpe_path, "vocab/ggml-vocab-gpt-2.gguf");
    auto spm = load(spm_path);
    auto bpe = load(bpe_path);
    ASSERT_TRUE(spm && bpe);
    EXPECT_EQ(spm->model_name(), "llama");
    EXPECT_EQ(spm->n_vocab(), 32000);
    EXPECT_EQ(spm->bos_id(), 1);
    EXPECT_EQ(spm->eos_id(), 2);
    EXPECT_TRUE(spm->is_eog(2));
    EXPECT_FALSE(spm->is_eog(1));
    EXPECT_EQ(bpe->model_name(), "gpt2");
    EXPECT_EQ(bpe->pre_name(), "gpt-2");
    EXPECT_EQ(bpe->n_vocab(), 50257);
    EXPECT_EQ(bpe->eos_id(), 50256);
    EXPECT_TRUE(bpe->is_eog(50256));
}

TEST(tokenizer_models, stories260k_encodes_once_upon_a_time_with_bos) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto tok = load(path);
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tok->encode("Once upon a time", true), (std::vector<int32_t>{1, 403, 407, 261, 378}));
    EXPECT_EQ(tok->decode(tok->encode("Once upon a time", true)), "Once upon a time");
}

TEST(tokenizer_models, rand10m_llama2_vocabulary_encodes_once_upon_a_time_with_bos) {
    TROUPE_REQUIRE_SHARED(path, "models/rand10M-F16.gguf");
    auto tok = load(path);
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tok->encode("Once upon a time", true), (std::vector<int32_t>{1, 9038, 2501, 263, 931}));
    EXPECT_EQ(tok->encode("Once upon a time", false), (std::vector<int32_t>{9038, 2501, 263, 931}));
}

TEST(tokenizer_models, shared_stories_round_trip_through_both_vocabularies) {
    TROUPE_REQUIRE_SHARED(spm_path, "vocab/ggml-vocab-llama-spm.gguf");
    TROUPE_REQUIRE_SHARED(bpe_path, "vocab/ggml-vocab-gpt-2.gguf");
    TROUPE_REQUIRE_SHARED(text_path, "text/stories.txt");
    const std::string text = read_all(text_path);
    ASSERT_GT(text.size(), 1000u);
    for (const std::string& path : {spm_path, bpe_path}) {
        auto tok = load(path);
        ASSERT_NE(tok, nullptr);
        const auto ids = tok->encode(text, true);
        EXPECT_EQ(tok->decode(ids), text) << path;
        EXPECT_LT(ids.size(), text.size() / 2) << path;
    }
}

TEST(tokenizer_models, test_vector_inputs_round_trip_through_both_vocabularies) {
    TROUPE_REQUIRE_SHARED(spm_path, "vocab/ggml-vocab-llama-spm.gguf");
    TROUPE_REQUIRE_SHARED(bpe_path, "vocab/ggml-vocab-gpt-2.gguf");
    for (const std::string& path : {spm_path, bpe_path}) {
        auto tok = load(path);
        ASSERT_NE(tok, nullptr);
        for (const std::string& input : read_inputs(path + ".inp")) {
            EXPECT_EQ(tok->decode(tok->encode(input, true)), input) << path << ": '" << input << "'";
        }
    }
}

// Not a benchmark: a coarse bound that catches accidental quadratic or linear-scan behaviour.
TEST(tokenizer_models, encoding_a_few_kilobytes_takes_well_under_ten_milliseconds) {
    TROUPE_REQUIRE_SHARED(spm_path, "vocab/ggml-vocab-llama-spm.gguf");
    TROUPE_REQUIRE_SHARED(bpe_path, "vocab/ggml-vocab-gpt-2.gguf");
    TROUPE_REQUIRE_SHARED(text_path, "text/stories.txt");
    const std::string text = read_all(text_path).substr(0, 4096);
    for (const std::string& path : {spm_path, bpe_path}) {
        auto tok = load(path);
        ASSERT_NE(tok, nullptr);
        tok->encode(text, true);  // warm caches
        double best_ms = 1e9;
        for (int rep = 0; rep < 3; ++rep) {
            const auto t0 = std::chrono::steady_clock::now();
            const auto ids = tok->encode(text, true);
            const auto t1 = std::chrono::steady_clock::now();
            ASSERT_FALSE(ids.empty());
            best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        EXPECT_LT(best_ms, 10.0) << path << ": 4 KB took " << best_ms << " ms";
    }
}

}  // namespace
}  // namespace troupe
