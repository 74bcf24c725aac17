// The troupe binary end to end: info, tokenize, synth on shared models, usage errors and exit codes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/config/config_loader.h"
#include "core/gguf/gguf_file.h"
#include "kernels/ref/quants.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

struct run_result {
    int rc;
    std::string out;
    std::string err;
};

std::string temp_path(const std::string& name) {
    return (::testing::TempDir().empty() ? std::string("/tmp/") : ::testing::TempDir()) + "troupe_cli_" +
           std::to_string(::getpid()) + "_" + name;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// Runs `troupe <args>`; each argument is shell-quoted.
run_result troupe(const std::vector<std::string>& args) {
    std::string cmd = quote(TROUPE_BIN);
    for (const auto& a : args) cmd += " " + quote(a);
    const std::string err_path = temp_path("stderr");
    cmd += " 2>" + quote(err_path);
    run_result r{};
    FILE* p = ::popen(cmd.c_str(), "r");
    EXPECT_NE(p, nullptr);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int status = ::pclose(p);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.err = read_file(err_path);
    std::remove(err_path.c_str());
    return r;
}

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

TEST(cli, tokenize_prints_the_ids_with_bos_on_one_line) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    auto r = troupe({"tokenize", "--model", model, "Once upon a time"});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, "1 403 407 261 378\n");
}

TEST(cli, tokenize_no_bos_drops_the_bos) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    auto r = troupe({"tokenize", "--no-bos", "-m", model, "Once upon a time"});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, "403 407 261 378\n");
}

TEST(cli, detokenize_round_trips_tokenize) {
    TROUPE_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
    const std::string text = "Hello world! It's 3.14 degrees, isn't it?";
    auto ids = troupe({"tokenize", "--model", vocab, text});
    ASSERT_EQ(ids.rc, 0) << ids.err;
    std::vector<std::string> args{"tokenize", "--model", vocab, "--detokenize"};
    std::istringstream in(ids.out);
    for (std::string id; in >> id;) args.push_back(id);
    ASSERT_GT(args.size(), 6u);
    auto back = troupe(args);
    EXPECT_EQ(back.rc, 0) << back.err;
    EXPECT_EQ(back.out, text + "\n");
}

TEST(cli, detokenize_refuses_ids_outside_the_vocabulary) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    auto r = troupe({"tokenize", "--model", model, "--detokenize", "1", "512"});
    EXPECT_EQ(r.rc, 1);
    EXPECT_TRUE(contains(r.err, "token id 512 is outside the vocabulary")) << r.err;
    r = troupe({"tokenize", "--model", model, "--detokenize", "1", "x"});
    EXPECT_EQ(r.rc, 2);
    EXPECT_TRUE(contains(r.err, "expected token ids, got 'x'")) << r.err;
}

TEST(cli, bench_compare_depth_decodes_both_contexts_step_for_step_and_prints_the_share) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    auto r = troupe({"bench", "--model", model, "--n-prompt", "96", "--n-gen", "8", "--reps", "2",
                     "--decode-after-prompt", "--compare-depth", "16"});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "depth: decode at context 96..103 runs at ")) << r.out;
    EXPECT_TRUE(contains(r.out, "% of decode at context 16..23 (median of 2 reps, steps alternated; best ")) << r.out;
    r = troupe({"bench", "--model", model, "--n-prompt", "16", "--n-gen", "8", "--decode-after-prompt",
                "--compare-depth", "16"});
    EXPECT_EQ(r.rc, 2);
    EXPECT_TRUE(contains(r.err, "--compare-depth 16 must be below --n-prompt 16")) << r.err;
}

TEST(cli, bench_prints_decode_beside_a_plain_read_alternated_with_its_steps) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    auto r = troupe({"bench", "--model", model, "--n-prompt", "16", "--n-gen", "4", "--reps", "2"});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "% of the bandwidth bound ")) << r.out;
    EXPECT_TRUE(contains(r.out, "% of a plain read of the step's bytes between the steps (median of 2 reps; the read "))
        << r.out;
    // With --compare-depth the steps alternate with the shallow decode instead.
    r = troupe({"bench", "--model", model, "--n-prompt", "32", "--n-gen", "4", "--reps", "1", "--decode-after-prompt",
                "--compare-depth", "16"});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_FALSE(contains(r.out, "of a plain read")) << r.out;
}

TEST(cli, info_describes_the_model) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    auto r = troupe({"info", model});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "llama.embedding_length = 64")) << r.out;
    EXPECT_TRUE(contains(r.out, "blk.4.ffn_down.weight")) << r.out;
}

TEST(cli, a_missing_model_file_gives_a_message_naming_the_path) {
    const std::string missing = "/nonexistent/dir/model.gguf";
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"info", missing},
             {"tokenize", "--model", missing, "hi"},
             {"synth", "--shape", "tiny", "--vocab", missing, "-o", temp_path("x.gguf")}}) {
        auto r = troupe(args);
        EXPECT_EQ(r.rc, 1) << args[0];
        EXPECT_TRUE(contains(r.err, missing)) << r.err;
    }
}

TEST(cli, bad_command_lines_give_a_clear_error_and_exit_code_2) {
    struct tcase {
        std::vector<std::string> args;
        std::string message;
    };
    const std::vector<tcase> cases{
        {{}, "usage: troupe <command>"},
        {{"frobnicate"},
         "troupe: unknown command 'frobnicate' (valid: run, serve, bench, info, tokenize, synth, perplexity, "
         "quantize, distill, template)"},
        {{"tokenize", "--modle", "m.gguf", "x"},
         "troupe tokenize: unknown flag '--modle' (valid: --model, --no-bos, --detokenize, --help)"},
        {{"tokenize", "--model"}, "--model needs a value (FILE)"},
        {{"tokenize", "--model", "m.gguf", "a", "b"}, "expected one TEXT argument, got 2"},
        {{"info"}, "troupe info: expected 1 argument, got 0"},
        {{"info", "a.gguf", "b.gguf"}, "expected 1 argument, got 2 ('b.gguf')"},
        {{"synth", "--shape", "huge", "--vocab", "v.gguf", "-o", "o.gguf"},
         "--shape: unknown shape 'huge' (valid: tiny, 110M, 1B, moe-1B)"},
        {{"synth", "--shape", "tiny", "--arch", "bert", "--vocab", "v.gguf", "-o", "o.gguf"},
         "--arch: unknown architecture 'bert' (valid: llama, qwen2, phi3, gemma2, mixtral, deepseek2)"},
        {{"synth", "--shape", "moe-1B", "--arch", "qwen2", "--vocab", "v.gguf", "-o", "o.gguf"},
         "shape moe-1B is a mixture of experts; it takes --arch mixtral or deepseek2, not qwen2"},
        {{"synth", "--shape", "tiny", "--vocab", "v.gguf", "--type", "q5_1", "-o", "o.gguf"},
         "--type: unknown type 'q5_1' (valid: f32, f16, q8_0, q4_0, q5_0, q2_k, q3_k, q4_k, q5_k, q6_k, q4_1, w4_g64, "
         "w4_g128)"},
        {{"synth", "--type", "f16"}, "--shape is required"},
        {{"run", "--model", "m.gguf", "--prompt", "hi", "--top-p", "1.5"},
         "troupe run: --top-p: sampling.top_p: must be between 0 and 1, got 1.5"},
        {{"run", "--model", "m.gguf", "--prompt", "hi", "--temperature", "warm"},
         "--temperature: sampling.temperature: expected a number, got 'warm'"},
        {{"run", "--model", "m.gguf", "--prompt", "hi", "--device", "gpu"},
         "--device: device: unknown value 'gpu' (valid: cpu, cuda)"},
        {{"run", "--model", "m.gguf", "--prompt", "hi", "--set", "kv.blok_size=8"},
         "--set: kv.blok_size: unknown key (valid: block_size, memory, prefix_caching, window_release, dtype, plugin)"},
        {{"run", "--prompt", "hi", "--config", "/nonexistent/c.yaml"},
         "/nonexistent/c.yaml: cannot open the config file"},
        {{"run", "--top-k", "5", "--top-k", "6"}, "--top-k given twice"},
        {{"bench", "--model", "m.gguf", "--n-gen", "0"}, "--n-gen: must be between 1 and 1000000, got 0"},
        {{"bench", "--model", "m.gguf", "--compare-depth", "128"},
         "--compare-depth: needs --decode-after-prompt and one sequence (--n-seqs 1)"},
    };
    for (const auto& c : cases) {
        auto r = troupe(c.args);
        std::string line;
        for (const auto& a : c.args) line += a + " ";
        EXPECT_EQ(r.rc, 2) << line << "\n" << r.err;
        EXPECT_TRUE(contains(r.err, c.message)) << line << "\ngot:      " << r.err << "\nexpected: " << c.message;
    }
}

TEST(cli, run_without_a_model_takes_the_shared_stories260K_or_says_how_to_name_one) {
    if (std::getenv("TROUPE_MODEL")) GTEST_SKIP() << "TROUPE_MODEL is set";
    auto r = troupe({"run", "--prompt", "Once upon a time", "--temperature", "0", "-n", "8"});
    if (testing::shared_file("models/stories260K.gguf")) {
        EXPECT_EQ(r.rc, 0) << r.err;
        EXPECT_TRUE(contains(r.out, "Once upon a time, there was a little girl")) << r.out;
    } else {
        EXPECT_EQ(r.rc, 2);
        EXPECT_TRUE(contains(r.err, "no model named: pass --model FILE.gguf")) << r.err;
    }
}

TEST(cli, every_command_has_help_listing_its_flags) {
    struct tcase {
        std::string command;
        std::vector<std::string> flags;
    };
    for (const auto& c :
         std::vector<tcase>{{"run",
                             {"--prompt", "--temperature", "--top-k", "--top-p", "--min-p", "--repeat-penalty",
                              "--frequency-penalty", "--presence-penalty", "--seed", "--max-tokens", "-n,", "--stop",
                              "--ignore-eos", "--config", "--model", "--device", "--threads", "--set"}},
                            {"bench", {"--model", "--n-prompt", "--n-gen"}},
                            {"info", {"usage: troupe info M.gguf"}},
                            {"tokenize", {"--model", "--no-bos", "--detokenize"}},
                            {"synth", {"--shape", "--vocab", "--type", "--output", "--seed"}}}) {
        auto r = troupe({c.command, "--help"});
        EXPECT_EQ(r.rc, 0) << c.command;
        for (const auto& f : c.flags)
            EXPECT_TRUE(contains(r.out, f)) << c.command << " help lacks " << f << ":\n" << r.out;
    }
    EXPECT_EQ(troupe({"--help"}).rc, 0);
    EXPECT_TRUE(contains(troupe({"help", "synth"}).out, "--shape"));
}

TEST(cli, flags_override_the_config_file_in_the_printed_config) {
    const std::string config = temp_path("c.yaml");
    std::ofstream(config) << "model: /from/config.gguf\nthreads: 3\nsampling:\n  temperature: 0.5\n  top_k: 7\n";
    auto r =
        troupe({"run", "--config", config, "--print-config", "--temperature", "0", "--stop", "a\\nb", "--stop", "x: y",
                "-n", "9", "--set", "scheduler.max_waiting=5", "--ignore-eos", "--model", "/flag/m: 1.gguf"});
    std::remove(config.c_str());
    ASSERT_EQ(r.rc, 0) << r.err;
    auto c = parse_config(r.out, "printed");
    ASSERT_TRUE(c.ok()) << c.message() << "\n" << r.out;
    EXPECT_EQ(c->model, "/flag/m: 1.gguf");
    EXPECT_EQ(c->threads, 3);
    EXPECT_EQ(c->sampling.temperature, 0.0f);
    EXPECT_EQ(c->sampling.top_k, 7);
    EXPECT_EQ(c->sampling.max_tokens, 9);
    EXPECT_EQ(c->sampling.stop_strings, (std::vector<std::string>{"a\nb", "x: y"}));
    EXPECT_TRUE(c->sampling.ignore_eos);
    EXPECT_EQ(c->scheduler.max_waiting, 5);
}

class synth_tiny : public ::testing::Test {
protected:
    void TearDown() override {
        for (const auto& p : paths_) std::remove(p.c_str());
    }
    std::string path(const std::string& name) {
        paths_.push_back(temp_path(name));
        return paths_.back();
    }
    std::vector<std::string> paths_;
};

TEST_F(synth_tiny, writes_a_gguf_that_the_reader_opens_with_the_expected_tensors) {
    TROUPE_REQUIRE_SHARED(vocab, "vocab/ggml-vocab-llama-spm.gguf");
    const std::string out = path("tiny.gguf");
    auto r = troupe({"synth", "--shape", "tiny", "--vocab", vocab, "--type", "q8_0", "-o", out});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "wrote " + out)) << r.err;
    auto f = gguf::gguf_file::open(out);
    ASSERT_TRUE(f.ok()) << f.message();
    const gguf::gguf_file& g = **f;
    EXPECT_EQ(g.string_or("general.architecture", ""), "llama");
    EXPECT_EQ(g.uint_or("llama.embedding_length", 0), 256u);
    EXPECT_EQ(g.uint_or("llama.block_count", 0), 2u);
    EXPECT_EQ(g.uint_or("llama.attention.head_count", 0), 8u);
    EXPECT_EQ(g.uint_or("llama.attention.head_count_kv", 0), 4u);
    EXPECT_EQ(g.uint_or("llama.feed_forward_length", 0), 768u);
    EXPECT_EQ(g.uint_or("llama.context_length", 0), 512u);
    EXPECT_EQ(g.uint_or("llama.vocab_size", 0), 32000u);
    EXPECT_NEAR(g.float_or("llama.attention.layer_norm_rms_epsilon", 0), 1e-5, 1e-9);
    EXPECT_EQ(g.float_or("llama.rope.freq_base", 0), 10000.0);
    auto tokens = g.get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok());
    EXPECT_EQ(tokens->size(), 32000u);
    EXPECT_EQ(g.string_or("tokenizer.ggml.model", ""), "llama");

    struct expected_tensor {
        std::string name;
        ggml_type type;
        std::vector<int64_t> dims;
    };
    std::vector<expected_tensor> expected{{"token_embd.weight", ggml_type::q8_0, {256, 32000}},
                                          {"output_norm.weight", ggml_type::f32, {256}},
                                          {"output.weight", ggml_type::q8_0, {256, 32000}}};
    for (int l = 0; l < 2; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        expected.push_back({b + "attn_norm.weight", ggml_type::f32, {256}});
        expected.push_back({b + "attn_q.weight", ggml_type::q8_0, {256, 256}});
        expected.push_back({b + "attn_k.weight", ggml_type::q8_0, {256, 128}});
        expected.push_back({b + "attn_v.weight", ggml_type::q8_0, {256, 128}});
        expected.push_back({b + "attn_output.weight", ggml_type::q8_0, {256, 256}});
        expected.push_back({b + "ffn_norm.weight", ggml_type::f32, {256}});
        expected.push_back({b + "ffn_gate.weight", ggml_type::q8_0, {256, 768}});
        expected.push_back({b + "ffn_up.weight", ggml_type::q8_0, {256, 768}});
        expected.push_back({b + "ffn_down.weight", ggml_type::q8_0, {768, 256}});
    }
    EXPECT_EQ(g.tensors().size(), expected.size());
    for (const auto& e : expected) {
        const gguf::tensor_info* t = g.find_tensor(e.name);
        ASSERT_NE(t, nullptr) << e.name;
        EXPECT_EQ(t->type, e.type) << e.name;
        EXPECT_EQ(t->dims, e.dims) << e.name;
    }

    // Norms are 1; matrices look like an initialized model: mean ~0, standard deviation ~0.02.
    const gguf::tensor_info* norm = g.find_tensor("blk.1.ffn_norm.weight");
    const auto* nv = reinterpret_cast<const float*>(norm->data);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(nv[i], 1.0f);
    const gguf::tensor_info* q = g.find_tensor("blk.0.ffn_gate.weight");
    std::vector<float> values(static_cast<size_t>(q->n_elements()));
    for (int64_t row = 0; row < 768; ++row) {
        ref::dequantize_row(q->type, q->data + row * row_bytes(q->type, 256), values.data() + row * 256, 256);
    }
    double sum = 0, sum2 = 0;
    for (float v : values) {
        sum += v;
        sum2 += static_cast<double>(v) * v;
    }
    const double mean = sum / values.size();
    const double sd = std::sqrt(sum2 / values.size() - mean * mean);
    EXPECT_NEAR(mean, 0.0, 0.001);
    EXPECT_NEAR(sd, 0.02, 0.001);
}

TEST_F(synth_tiny, the_same_seed_writes_the_same_file_whatever_the_thread_count) {
    TROUPE_REQUIRE_SHARED(vocab, "models/stories260K.gguf");
    const std::string a = path("a.gguf"), b = path("b.gguf"), c = path("c.gguf");
    ASSERT_EQ(troupe({"synth", "--shape", "tiny", "--vocab", vocab, "--type", "q4_0", "-o", a, "--threads", "1"}).rc,
              0);
    ASSERT_EQ(troupe({"synth", "--shape", "tiny", "--vocab", vocab, "--type", "q4_0", "-o", b, "--threads", "3"}).rc,
              0);
    ASSERT_EQ(troupe({"synth", "--shape", "tiny", "--vocab", vocab, "--type", "q4_0", "-o", c, "--seed", "2"}).rc, 0);
    const std::string fa = read_file(a);
    EXPECT_GT(fa.size(), 1000000u);
    EXPECT_TRUE(fa == read_file(b));
    EXPECT_FALSE(fa == read_file(c));
}

TEST_F(synth_tiny, ctx_sets_the_declared_context_length) {
    TROUPE_REQUIRE_SHARED(vocab, "models/stories260K.gguf");
    const std::string out = path("ctx.gguf");
    auto r = troupe({"synth", "--shape", "tiny", "--vocab", vocab, "--ctx", "8192", "-o", out});
    ASSERT_EQ(r.rc, 0) << r.err;
    r = troupe({"info", out});
    EXPECT_TRUE(contains(r.out, "llama.context_length = 8192")) << r.out;
    r = troupe({"synth", "--shape", "tiny", "--vocab", vocab, "--ctx", "8k", "-o", out});
    EXPECT_EQ(r.rc, 2);
    EXPECT_TRUE(contains(r.err, "--ctx: expected 16 to 1048576, got '8k'")) << r.err;
}

TEST_F(synth_tiny, every_type_writes_its_matrices_in_that_type) {
    TROUPE_REQUIRE_SHARED(vocab, "models/stories260K.gguf");
    for (const auto& [name, type] : std::vector<std::pair<std::string, ggml_type>>{{"f32", ggml_type::f32},
                                                                                   {"f16", ggml_type::f16},
                                                                                   {"q4_0", ggml_type::q4_0},
                                                                                   {"q4_k", ggml_type::q4_k},
                                                                                   {"q4_1", ggml_type::q4_1},
                                                                                   {"w4_g64", ggml_type::w4_g64},
                                                                                   {"w4_g128", ggml_type::w4_g128}}) {
        const std::string out = path(name + ".gguf");
        auto r = troupe({"synth", "--shape", "tiny", "--vocab", vocab, "--type", name, "-o", out});
        ASSERT_EQ(r.rc, 0) << r.err;
        auto f = gguf::gguf_file::open(out);
        ASSERT_TRUE(f.ok()) << f.message();
        EXPECT_EQ((*f)->find_tensor("blk.0.ffn_down.weight")->type, type) << name;
        EXPECT_EQ((*f)->find_tensor("output.weight")->dims, (std::vector<int64_t>{256, 512})) << name;
        EXPECT_EQ((*f)->find_tensor("output_norm.weight")->type, ggml_type::f32) << name;
    }
}

}  // namespace
}  // namespace troupe
