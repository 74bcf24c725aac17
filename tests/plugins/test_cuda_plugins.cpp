// Which plugins a CUDA run needs on the GPU (core/loader/cuda_plugins.h), and loading them there so score(cuda)
// decides: on this GPU-less machine, through the same host a GPU run uses. A CPU-only plugin asked to run on cuda
// is refused with one message naming the plugin and the backend; one that can run there is made for cuda, and the
// loader's check says that the CUDA graph does not call plugin ops yet.
#include <unistd.h>

#include <filesystem>

#include "core/gguf/gguf_writer.h"
#include "core/loader/cuda_plugins.h"
#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

namespace fs = std::filesystem;

// A quant op that claims a fixed set of types (the question cuda_plugin_needs asks); never prepares anything.
class claiming_op final : public quant_op {
public:
    explicit claiming_op(std::vector<ggml_type> types) : types_(std::move(types)) {}
    std::string name() const override { return "claiming"; }
    bool claims(ggml_type t) const override { return std::find(types_.begin(), types_.end(), t) != types_.end(); }
    result<std::shared_ptr<const prepared_weight>> prepare(const weight_view&) override {
        return make_error("not in this test");
    }
    status matmul(const prepared_weight&, const float*, float*, int64_t, const parallel_for_fn&) override {
        return make_error("not in this test");
    }

private:
    std::vector<ggml_type> types_;
};

class cuda_plugins : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("troupe_cuda_plugins_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir_);
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    // A file with an F16 matrix, plus a Q4_1 one (a type the CUDA backend does not take) when asked.
    std::shared_ptr<const gguf::gguf_file> model(bool with_q4_1) {
        gguf::gguf_writer w;
        w.add_tensor("blk.0.attn_q.weight", ggml_type::f16, {32, 2}, std::vector<uint8_t>(128, 0));
        if (with_q4_1) w.add_tensor("blk.0.ffn_up.weight", ggml_type::q4_1, {32, 2}, std::vector<uint8_t>(40, 0));
        const std::string path = (dir_ / "model.gguf").string();
        EXPECT_TRUE(w.write(path).ok());
        auto f = gguf::gguf_file::open(path);
        EXPECT_TRUE(f.ok()) << f.message();
        return *f;
    }
    static engine_config config_with(const std::string& kv_plugin) {
        engine_config c;
        c.plugins.plugin_dir = TROUPE_TEST_FIXTURE_DIR;
        c.plugins.quant = plugin_config("claims_f16");
        c.plugins.more_quant = {plugin_config("claims_q4_1")};
        c.kv.plugin = plugin_config(kv_plugin);
        return c;
    }
    fs::path dir_;
};

TEST_F(cuda_plugins, only_what_the_backend_lacks_is_needed_on_the_gpu) {
    const std::vector<std::shared_ptr<quant_op>> ops = {
        std::make_shared<claiming_op>(std::vector<ggml_type>{ggml_type::f16}),
        std::make_shared<claiming_op>(std::vector<ggml_type>{ggml_type::q4_1, ggml_type::f16})};
    struct need_case {
        const char* what;
        bool with_q4_1;
        const char* kv_plugin;
        std::vector<std::string> expected;  // "kind/name: why"
    };
    const std::vector<need_case> cases = {
        {"F16 weights, no kv plugin: the backend does it all", false, "none", {}},
        {"Q4_1 weights: the first plugin that claims them",
         true,
         "none",
         {"quant/claims_q4_1: plugins.quant: it claims the model's Q4_1 weights, which the CUDA backend does not "
          "take itself"}},
        {"a kv plugin: always",
         false,
         "complete",
         {"kv/complete: kv.plugin: its KV cache layout is its own (no built-in CUDA kernel reads it)"}},
    };
    for (const need_case& c : cases) {
        const auto needs = cuda_plugin_needs(config_with(c.kv_plugin), *model(c.with_q4_1), ops);
        std::vector<std::string> got;
        for (const cuda_plugin_need& n : needs) {
            got.push_back(std::string(plugin_kind_name(n.spec.kind)) + "/" + n.spec.name + ": " + n.why);
        }
        EXPECT_EQ(got, c.expected) << c.what;
    }
}

TEST_F(cuda_plugins, a_cpu_only_plugin_asked_to_run_on_cuda_is_refused_naming_it_and_the_backend) {
    plugin_host gpu(plugin_host_options{TROUPE_TEST_FIXTURE_DIR, plugin_backend::cuda});
    const auto needs = cuda_plugin_needs(config_with("complete"), *model(false), {});
    auto loaded = load_cuda_plugins(gpu, needs);
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(
        loaded.message(),
        "plugin kv/complete: cannot run on the cuda backend (its score refuses it) (needed on the GPU: kv.plugin: "
        "its KV cache layout is its own (no built-in CUDA kernel reads it))");
    // The same plugin loads for the CPU.
    plugin_host cpu(plugin_host_options{TROUPE_TEST_FIXTURE_DIR, plugin_backend::cpu});
    EXPECT_TRUE(cpu.load_kv("complete").ok());
}

TEST_F(cuda_plugins, a_plugin_whose_score_accepts_cuda_is_made_for_cuda) {
    plugin_host gpu(plugin_host_options{TROUPE_TEST_FIXTURE_DIR, plugin_backend::cuda});
    auto loaded = load_cuda_plugins(gpu, cuda_plugin_needs(config_with("cudakv"), *model(false), {}));
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    ASSERT_EQ(loaded->size(), 1u);
    const plugin_instance& instance = *loaded->front().instance;
    EXPECT_EQ(instance.backend(), plugin_backend::cuda);
    EXPECT_EQ(instance.library().score(plugin_backend::cuda), 40);
    troupe_kv_shape shape{sizeof(troupe_kv_shape), TROUPE_KV_SHAPE_VERSION, 1, 2, 32, 16, 4, TROUPE_BACKEND_CUDA};
    troupe_kv_layout layout{};
    ASSERT_EQ(instance.kv_ops()->layout(instance.handle(), &shape, &layout), TROUPE_OK);
    EXPECT_EQ(layout.bytes_per_block, size_t{100 + TROUPE_BACKEND_CUDA}) << "create saw params.backend = CUDA";
}

TEST_F(cuda_plugins, the_loaders_check_refuses_what_the_cuda_graph_cannot_call_yet_and_passes_the_rest) {
    EXPECT_TRUE(check_cuda_plugins(config_with("none"), model(false)).ok());
    const status refused = check_cuda_plugins(config_with("complete"), model(false));
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.message().find("plugin kv/complete: cannot run on the cuda backend"), std::string::npos);
    const status not_wired = check_cuda_plugins(config_with("cudakv"), model(false));
    ASSERT_FALSE(not_wired.ok());
    EXPECT_EQ(not_wired.message(),
              "plugin kv/cudakv: runs on cuda (score 40), but the CUDA graph does not call KV plugin ops yet (needed "
              "on the GPU: kv.plugin: its KV cache layout is its own (no built-in CUDA kernel reads it)); run it with "
              "--device cpu");
}

}  // namespace
}  // namespace troupe::testing
