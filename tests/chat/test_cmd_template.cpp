// `troupe template` and `troupe run --chat` as a user runs them: on a copy of stories260K carrying a Jinja
// chat template (the model's own template and BOS text are used; run --chat generates from exactly the
// rendered prompt), on stories260K itself (no template: the built-in plain one, and the reason on stderr),
// and their errors (a raising template exits 1 with its message; contradictory flags exit 2).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/gguf/gguf_file.h"
#include "core/gguf/gguf_writer.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

struct run_result {
    int rc = -1;
    std::string out;
    std::string err;
};

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

class cmd_template : public ::testing::Test {
protected:
    std::filesystem::path dir_;

    void SetUp() override {
        dir_ = std::filesystem::path(::testing::TempDir()) /
               ("troupe_cmd_template_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::create_directories(dir_);
        write("chat.json",
              R"([{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Once upon a time"}])");
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    std::string write(const std::string& name, const std::string& text) {
        const std::string path = (dir_ / name).string();
        std::ofstream(path, std::ios::binary) << text;
        return path;
    }

    run_result run(const std::string& args) {
        const std::string err = (dir_ / "stderr.txt").string();
        const std::string cmd = std::string(TROUPE_BIN) + " " + args + " 2>" + err;
        run_result r;
        FILE* p = popen(cmd.c_str(), "r");
        if (!p) return r;
        char buf[4096];
        size_t n = 0;
        while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
        const int status = pclose(p);
        r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        r.err = read_all(err);
        return r;
    }

    // stories260K with a chat template added to its metadata.
    std::string model_with_template(const std::string& source, const std::string& jinja) {
        auto file = gguf::gguf_file::open(source);
        EXPECT_TRUE(file) << file.message();
        gguf::gguf_writer w;
        w.copy_metadata(**file);
        w.set_string("tokenizer.chat_template", jinja);
        for (const auto& t : (*file)->tensors()) w.add_tensor(t.name, t.type, t.dims, std::span(t.data, t.n_bytes));
        const std::string path = (dir_ / "with-template.gguf").string();
        EXPECT_TRUE(w.write(path).ok());
        return path;
    }
};

const char* role_template =
    "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

TEST_F(cmd_template, the_models_own_template_renders_and_run_chat_generates_from_exactly_that_prompt) {
    TROUPE_REQUIRE_SHARED(source, "models/stories260K.gguf");
    const std::string model = model_with_template(source, role_template);
    const std::string chat = (dir_ / "chat.json").string();
    const run_result t = run("template --model " + model + " --messages " + chat);
    ASSERT_EQ(t.rc, 0) << t.err;
    EXPECT_EQ(t.out, "<s>system: Be kind.\nuser: Once upon a time\nassistant:");
    EXPECT_NE(t.err.find("the model's own chat template"), std::string::npos) << t.err;
    const run_result no_prompt = run("template --model " + model + " --messages " + chat + " --no-generation-prompt");
    EXPECT_EQ(no_prompt.out, "<s>system: Be kind.\nuser: Once upon a time\n");

    const std::string sampling = " -n 12 --temperature 0";
    const run_result chat_run =
        run("run --model " + model + " --chat --system 'Be kind.' --prompt 'Once upon a time'" + sampling);
    ASSERT_EQ(chat_run.rc, 0) << chat_run.err;
    EXPECT_NE(chat_run.err.find("chat template: the model's own chat template"), std::string::npos) << chat_run.err;
    // The same prompt given as text (the tokenizer adds the BOS the template wrote): the same greedy reply.
    const std::string rendered = "system: Be kind.\\nuser: Once upon a time\\nassistant:";
    const run_result plain_run = run("run --model " + model + " --prompt '" + rendered + "'" + sampling);
    ASSERT_EQ(plain_run.rc, 0) << plain_run.err;
    EXPECT_FALSE(chat_run.out.empty());
    EXPECT_EQ(plain_run.out, "system: Be kind.\nuser: Once upon a time\nassistant:" + chat_run.out);
}

TEST_F(cmd_template, a_model_without_a_template_uses_the_builtin_plain_one_and_says_why) {
    TROUPE_REQUIRE_SHARED(source, "models/stories260K.gguf");
    const run_result t = run("template --model " + source + " --messages " + (dir_ / "chat.json").string());
    ASSERT_EQ(t.rc, 0) << t.err;
    EXPECT_EQ(t.out, "Be kind.\nOnce upon a time");
    EXPECT_NE(t.err.find("built-in plain template: the model has no tokenizer.chat_template"), std::string::npos)
        << t.err;
}

TEST_F(cmd_template, a_raising_template_exits_1_with_its_message_and_wrong_flags_exit_2) {
    const std::string chat = (dir_ / "chat.json").string();
    const std::string raising =
        write("raise.jinja",
              "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') "
              "}}{% endif %}");
    const run_result r = run("template --template " + raising + " --messages " + chat);
    EXPECT_EQ(r.rc, 1);
    EXPECT_EQ(r.err, "troupe template: System role not supported\n");

    const std::string broken = write("broken.jinja", "line\n{% for m in messages %}{{ m.role }");
    const run_result b = run("template --template " + broken + " --messages " + chat);
    EXPECT_EQ(b.rc, 1);
    EXPECT_NE(b.err.find("syntax error at line 2, column"), std::string::npos) << b.err;

    EXPECT_EQ(run("template --template " + raising + " --model x.gguf --messages " + chat).rc, 2);
    EXPECT_EQ(run("template --template " + raising).rc, 2);
    const run_result missing = run("template --template " + raising + " --messages " + (dir_ / "none.json").string());
    EXPECT_EQ(missing.rc, 1);
    EXPECT_NE(missing.err.find("cannot open"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace troupe
