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
            const ggml_type expect = t.dims[0] % 32 == 0 ? want : ggml_type::f16;  // ffn_down: rows of 172
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

}  // namespace
}  // namespace troupe
