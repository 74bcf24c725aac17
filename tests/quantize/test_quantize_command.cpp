// `troupe quantize` end to end: refusals before any work (each message, nothing written), RTN's bytes equal
// kernels/ref's quantizers, and the written GGUF loads and runs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/gguf/gguf_file.h"
#include "core/quantize/quantize_plan.h"
#include "kernels/ref/quants.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

struct run_result {
    int rc;
    std::string out, err;
};

std::string temp_path(const std::string& name) {
    return "/tmp/troupe_quantize_cmd_" + std::to_string(::getpid()) + "_" + name;
}

run_result troupe(const std::vector<std::string>& args) {
    std::string cmd = std::string("'") + TROUPE_BIN + "'";
    for (const auto& a : args) cmd += " '" + a + "'";
    const std::string err_path = temp_path("stderr");
    cmd += " 2>'" + err_path + "'";
    run_result r{};
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int st = ::pclose(p);
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    std::ifstream in(err_path);
    std::stringstream s;
    s << in.rdbuf();
    r.err = s.str();
    std::remove(err_path.c_str());
    return r;
}

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

TEST(quantize_command, each_refusal_comes_before_any_work_with_one_message_and_writes_nothing) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    const std::string out = temp_path("refused.gguf");
    const std::string tiny = temp_path("tiny.txt");
    std::ofstream(tiny) << "Once upon a time there was a cat.";
    struct tcase {
        std::vector<std::string> args;
        int rc;
        std::string message;
    };
    const tcase cases[] = {
        {{"--method", "nope", "--type", "q4_0"}, 2, "troupe quantize: --method nope: unknown method (methods: "},
        {{"--method", "rtn", "--type", "q5_9"},
         2,
         "troupe quantize: --type 'q5_9': unknown (valid: q4_0, q4_1, q4_k, q8_0, w4_g64, w4_g128, w4"},
        {{"--method", "rtn", "--type", "q4_k"},
         1,
         "no linear of the model can be written as Q4_K: its rows (172, 64 weights) are not multiples of Q4_K's "
         "blocks of 256"},
        {{"--method", "gptq", "--type", "q4_0"},
         2,
         "troupe quantize: method gptq calibrates from activations: give --calib TEXT.txt"},
        {{"--method", "gptq", "--type", "q4_0", "--calib", tiny, "--ctx", "64"},
         1,
         ": the calibration text is 11 tokens, fewer than one window of --ctx 64: give a longer text or a smaller "
         "--ctx"},
    };
    for (const tcase& c : cases) {
        std::vector<std::string> args = {"quantize", "--model", model, "-o", out};
        args.insert(args.end(), c.args.begin(), c.args.end());
        SCOPED_TRACE(c.args[1] + " " + c.args[3]);
        const run_result r = troupe(args);
        EXPECT_EQ(r.rc, c.rc) << r.err;
        EXPECT_TRUE(contains(r.err, c.message)) << r.err;
        EXPECT_FALSE(std::filesystem::exists(out));
    }
    const run_result unknown = troupe({"quantize", "--model", model, "--method", "nope", "--type", "q4_0", "-o", out});
    EXPECT_TRUE(contains(unknown.err, "rtn")) << unknown.err;  // the methods found are listed
    std::remove(tiny.c_str());
}

TEST(quantize_command, rtn_writes_the_bytes_of_the_reference_quantizers_and_the_file_runs) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(text, "text/stories.txt");
    auto in = gguf::gguf_file::open(model);
    ASSERT_TRUE(in.ok());
    for (const char* type : {"q8_0", "q4_0"}) {
        SCOPED_TRACE(type);
        const std::string out = temp_path(std::string(type) + ".gguf");
        const run_result r = troupe({"quantize", "--model", model, "--method", "rtn", "--type", type, "-o", out});
        ASSERT_EQ(r.rc, 0) << r.err;
        EXPECT_TRUE(contains(r.out, "wrote " + out)) << r.out;
        auto q = gguf::gguf_file::open(out);
        ASSERT_TRUE(q.ok()) << q.message();
        const ggml_type want = std::string(type) == "q8_0" ? ggml_type::q8_0 : ggml_type::q4_0;
        int n_checked = 0;
        for (const gguf::tensor_info& t : (*in)->tensors()) {
            const gguf::tensor_info* o = (*q)->find_tensor(t.name);
            ASSERT_NE(o, nullptr) << t.name;
            EXPECT_EQ(o->dims, t.dims);
            const bool linear = t.dims.size() == 2 && t.name != "token_embd.weight";
            if (!linear) {  // norms and token_embd as they were
                EXPECT_EQ(o->type, t.type) << t.name;
                EXPECT_EQ(0, std::memcmp(o->data, t.data, t.n_bytes)) << t.name;
                continue;
            }
            // ffn_down: rows of 172 in F16; the output matrix in llama.cpp's default (Q8_0 here: rows of 64)
            const ggml_type expect = t.dims[0] % 32 != 0         ? ggml_type::f16
                                     : t.name == "output.weight" ? default_output_type(want, t.dims[0])
                                                                 : want;
            EXPECT_EQ(o->type, expect) << t.name;
            std::vector<uint8_t> ref(o->n_bytes);
            const size_t row = row_bytes(expect, t.dims[0]);
            for (int64_t r = 0; r < t.dims[1]; ++r) {
                ref::quantize_row(expect, reinterpret_cast<const float*>(t.data) + r * t.dims[0], ref.data() + r * row,
                                  t.dims[0]);
            }
            EXPECT_EQ(0, std::memcmp(o->data, ref.data(), ref.size())) << t.name;
            ++n_checked;
        }
        EXPECT_EQ(n_checked, 5 * 7 + 1);
        const run_result ppl = troupe({"perplexity", "--model", out, "--file", text, "--ctx", "128"});
        EXPECT_EQ(ppl.rc, 0) << ppl.err;
        EXPECT_TRUE(contains(ppl.out, "PPL = ")) << ppl.out;
        std::remove(out.c_str());
    }
}

TEST(quantize_command, the_method_and_its_params_come_from_the_config_and_set) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(text, "text/stories.txt");
    const std::string out = temp_path("params.gguf");
    const run_result bad = troupe({"quantize", "--model", model, "--method", "gptq", "--type", "q4_0", "--calib", text,
                                   "--set", "quantize.params.bogus=1", "-o", out});
    EXPECT_EQ(bad.rc, 1);
    EXPECT_TRUE(contains(bad.err, "troupe quantize: plugin quant/gptq: params.bogus: unknown key")) << bad.err;
    EXPECT_FALSE(std::filesystem::exists(out));
    const std::string config = temp_path("quantize.yaml");
    for (const char* damp : {"2.0", "0.05"}) {  // out of range, then fine: the config's params reach the plugin
        SCOPED_TRACE(damp);
        std::ofstream(config) << "quantize:\n  name: gptq\n  params: {damp: " << damp << "}\n";
        const run_result r = troupe({"quantize", "--config", config, "--model", model, "--type", "q8_0", "--calib",
                                     text, "--ctx", "128", "--calib-tokens", "512", "-o", out});
        if (std::string(damp) == "2.0") {
            EXPECT_EQ(r.rc, 1);
            EXPECT_TRUE(contains(r.err, "troupe quantize: plugin quant/gptq: params.damp")) << r.err;
            EXPECT_FALSE(std::filesystem::exists(out));
        } else {
            EXPECT_EQ(r.rc, 0) << r.err;
            EXPECT_TRUE(contains(r.out, "Q8_0 by gptq")) << r.out;
        }
    }
    std::remove(out.c_str());
    std::remove(config.c_str());
}

double ppl_of(const run_result& r) {
    const size_t at = r.out.find("PPL = ");
    return at == std::string::npos ? -1 : std::stod(r.out.substr(at + 6));
}

TEST(quantize_command, awq_and_gptq_calibrate_through_their_taps_and_write_files_that_run) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(text, "text/stories.txt");
    const run_result f32 = troupe({"perplexity", "--model", model, "--file", text, "--ctx", "128"});
    ASSERT_EQ(f32.rc, 0) << f32.err;
    auto in = gguf::gguf_file::open(model);
    ASSERT_TRUE(in.ok());
    for (const char* method : {"awq", "gptq"}) {
        SCOPED_TRACE(method);
        const std::string out = temp_path(std::string(method) + ".gguf");
        const run_result r = troupe({"quantize", "--model", model, "--method", method, "--type", "q4_1", "--calib",
                                     text, "--ctx", "128", "--calib-tokens", "2048", "-o", out});
        ASSERT_EQ(r.rc, 0) << r.err;
        // Layer by layer: five layers and the output matrix, 16 windows of 128 each.
        EXPECT_TRUE(contains(r.err, "calibration pass 6/6, window 16/16 (128 tokens each)")) << r.err;
        auto q = gguf::gguf_file::open(out);
        ASSERT_TRUE(q.ok()) << q.message();
        EXPECT_EQ((*q)->string_or("troupe.quantize.method", ""), method);
        EXPECT_EQ((*q)->find_tensor("blk.0.attn_q.weight")->type, ggml_type::q4_1);
        if (std::string(method) == "awq") {  // its input scales were folded into the norms
            const gguf::tensor_info* before = (*in)->find_tensor("blk.0.ffn_norm.weight");
            EXPECT_NE(0, std::memcmp(before->data, (*q)->find_tensor("blk.0.ffn_norm.weight")->data, before->n_bytes));
        }
        const run_result ppl = troupe({"perplexity", "--model", out, "--file", text, "--ctx", "128"});
        ASSERT_EQ(ppl.rc, 0) << ppl.err;
        // 4-bit weights cost some perplexity, a broken fold or calibration far more.
        EXPECT_LT(ppl_of(ppl), 1.2 * ppl_of(f32)) << ppl.out << " vs F32 " << f32.out;
        std::remove(out.c_str());
    }
}

}  // namespace
}  // namespace troupe
