// The host side of the CUDA backend, on any machine: batch flattening, model checks, weight preparation,
// library loading and the no-GPU fallback (the path every CI run takes).
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "core/backend/cuda_batch.h"
#include "core/backend/cuda_runner.h"
#include "core/backend/cuda_upload.h"
#include "core/backend/llama_view_of.h"
#include "core/log/log.h"
#include "kernels/fp16.h"
#include "kernels/ref/quants.h"
#include "tests/common/shared_data.h"
#include "tests/cuda/cuda_test_support.h"

namespace troupe {
namespace {

using testing::make_tiny_model;

const cuda_batch_limits limits{100, 64, 4, 10};

TEST(cuda_batch, flattens_sequences_in_order_with_their_positions_blocks_and_logits_rows) {
    forward_batch batch;
    batch.seqs.push_back({7, {11, 12, 13}, 0, {2, 5}, false});  // prefill: logits of the last token only
    batch.seqs.push_back({9, {21, 22}, 5, {0, 1}, true});       // verification: logits of every token
    cuda_flat_batch f;
    ASSERT_TRUE(flatten_batch(batch, limits, f).ok());
    EXPECT_EQ(f.tokens, (std::vector<int32_t>{11, 12, 13, 21, 22}));
    EXPECT_EQ(f.positions, (std::vector<int32_t>{0, 1, 2, 5, 6}));
    EXPECT_EQ(f.seq_of, (std::vector<int32_t>{0, 0, 0, 1, 1}));
    EXPECT_EQ(f.block_table_offsets, (std::vector<int32_t>{0, 2, 4}));
    EXPECT_EQ(f.block_tables, (std::vector<int32_t>{2, 5, 0, 1}));
    EXPECT_EQ(f.out_tokens, (std::vector<int32_t>{2, 3, 4}));
    EXPECT_EQ(f.row_begin, (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(f.n_rows, (std::vector<int32_t>{1, 2}));

    std::vector<float> logits(3 * 100);
    const troupe_cuda_batch c = f.c_batch(logits.data());
    EXPECT_EQ(c.struct_size, TROUPE_CUDA_BATCH_V2_SIZE);  // no tree: the batch a revision 2 backend takes
    EXPECT_EQ(c.n_tokens, 5);
    EXPECT_EQ(c.n_seqs, 2);
    EXPECT_EQ(c.n_out_rows, 3);
    EXPECT_EQ(c.block_tables[c.block_table_offsets[1]], 0);
    EXPECT_EQ(c.logits, logits.data());
}

TEST(cuda_batch, refuses_what_the_device_must_never_see_naming_the_sequence) {
    struct bad_case {
        sequence_step step;
        const char* message;
    };
    const bad_case cases[] = {
        {{3, {}, 0, {0}, false}, "sequence 3: no tokens in the step"},
        {{3, {1, 2}, 7, {0, 1}, false}, "sequence 3: block table covers 8 positions, the step needs 9"},
        {{3, {1}, 0, {10}, false}, "sequence 3: block id 10 outside the pool of 10"},
        {{3, {1}, 0, {-1}, false}, "sequence 3: block id -1 outside the pool of 10"},
        {{3, {100}, 0, {0}, false}, "sequence 3: token id 100 outside the vocabulary of 100"},
        {{3, {1}, 64, {0}, false}, "sequence 3: positions [64, 65) exceed the context of 64"},
        {{3, {1}, -1, {0}, false}, "sequence 3: positions [-1, 0) exceed the context of 64"},
    };
    for (const bad_case& c : cases) {
        forward_batch batch;
        batch.seqs.push_back({1, {5}, 0, {0}, false});
        batch.seqs.push_back(c.step);
        cuda_flat_batch f;
        const status s = flatten_batch(batch, limits, f);
        ASSERT_FALSE(s.ok()) << c.message;
        EXPECT_EQ(s.message(), c.message);
    }
}

TEST(cuda_model_view, a_wrong_weight_shape_is_reported_with_layer_weight_and_both_shapes) {
    auto m = make_tiny_model(ggml_type::f32, false);
    m->view.layers[1].wq.n_out = 30;
    const status s = check_llama_view(m->view);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.message(), "tiny.gguf: layer 1 wq has shape [30, 32] (rows, row length), expected [32, 32]");
}

// The CUDA graph runs the dense families, experts and latent attention (deepseek2). A latent model's view is checked
// like the others: a layer without its MLA tensors, or with one of the wrong shape, is refused naming the layer and
// the tensor, never computed wrongly.
TEST(cuda_model_view, latent_attention_views_pass_and_a_malformed_one_is_refused_naming_layer_and_tensor) {
    TROUPE_REQUIRE_SHARED(path, "models/arch/tiny-deepseek2.gguf");
    auto file = gguf::gguf_file::open(path);
    ASSERT_TRUE(file.ok()) << file.message();
    auto w = bind_llama_weights(*file);
    ASSERT_TRUE(w.ok()) << w.message();
    llama_weights_view view = llama_view_of(*w);
    EXPECT_EQ(view.beyond_cuda_graph, "");
    EXPECT_TRUE(check_llama_view(view).ok()) << check_llama_view(view).message();
    EXPECT_TRUE(needs_arch_features(view)) << "a backend before revision 10 must not take it as llama";

    llama_weights_view bad_shape = view;
    bad_shape.layers[1].mla->wkv_b.n_out -= 1;
    const int64_t rows = view.layers[1].mla->wkv_b.n_out, rank = view.layers[1].mla->wkv_b.n_in;
    EXPECT_EQ(check_llama_view(bad_shape).message(), "tiny-deepseek2.gguf: layer 1 attn_kv_b has shape [" +
                                                         std::to_string(rows - 1) + ", " + std::to_string(rank) +
                                                         "] (rows, row length), expected [" + std::to_string(rows) +
                                                         ", " + std::to_string(rank) + "]");
    llama_weights_view missing = view;
    missing.layers[2].mla.reset();
    EXPECT_EQ(check_llama_view(missing).message(),
              "tiny-deepseek2.gguf: layer 2 has no latent attention tensors, and the model latent attention");
    // A latent row wider than the kernels hold (kv_lora_rank + rope_dim over 1024), or an odd RoPE width.
    for (const auto& [rank, rope] : {std::pair{1000, 64}, std::pair{64, 7}}) {
        llama_weights_view wide = view;
        wide.hp.mla->kv_lora_rank = rank;
        wide.hp.mla->rope_dim = rope;
        const std::string m = check_llama_view(wide).message();
        EXPECT_NE(m.find("tiny-deepseek2.gguf: latent attention the CUDA graph cannot run: "), std::string::npos) << m;
        EXPECT_NE(m.find("kv_lora_rank " + std::to_string(rank) + " + rope_dim " + std::to_string(rope) +
                         " (even, at most 1024 together)"),
                  std::string::npos)
            << m;
    }

    TROUPE_REQUIRE_SHARED(mixtral_path, "models/arch/tiny-mixtral.gguf");
    auto mixtral = gguf::gguf_file::open(mixtral_path);
    ASSERT_TRUE(mixtral.ok()) << mixtral.message();
    auto mw = bind_llama_weights(*mixtral);
    ASSERT_TRUE(mw.ok()) << mw.message();
    EXPECT_EQ(llama_view_of(*mw).beyond_cuda_graph, "");  // experts run on the CUDA graph
    EXPECT_TRUE(check_llama_view(llama_view_of(*mw)).ok()) << check_llama_view(llama_view_of(*mw)).message();
}

TEST(cuda_model_view, hyper_parameters_that_no_kernel_can_run_are_refused) {
    auto m = make_tiny_model(ggml_type::f32, false);
    m->view.hp.n_kv_heads = 3;
    EXPECT_NE(check_llama_view(m->view).message().find("n_heads 4 is not a multiple of n_kv_heads 3"),
              std::string::npos);
    m = make_tiny_model(ggml_type::f32, false);
    m->view.hp.rope_dims = 7;
    EXPECT_NE(check_llama_view(m->view).message().find("rope_dims 7 must be even"), std::string::npos);
    m = make_tiny_model(ggml_type::f32, false);
    m->view.layers.pop_back();
    EXPECT_NE(check_llama_view(m->view).message().find("1 layers of weights for n_layers 2"), std::string::npos);
}

// tiny-mixtral's experts with what a malformed file or description could bring: each refused naming the layer, the
// tensor and the shape or count, before anything reaches a device.
TEST(cuda_model_view, experts_the_cuda_graph_cannot_route_or_whose_tensors_have_the_wrong_shape_are_refused) {
    TROUPE_REQUIRE_SHARED(path, "models/arch/tiny-mixtral.gguf");
    auto w = testing::load_llama_weights(path);
    ASSERT_TRUE(w.ok()) << w.message();
    const llama_weights_view good = llama_view_of(*w);
    ASSERT_TRUE(check_llama_view(good).ok()) << check_llama_view(good).message();

    llama_weights_view v = good;
    v.hp.moe->n_used = 17;
    EXPECT_NE(check_llama_view(v).message().find("experts the CUDA graph cannot route: 4 experts (1 to 256), 17 used"),
              std::string::npos)
        << check_llama_view(v).message();
    v = good;
    v.hp.moe->n_used = 5;  // more than the 4 experts
    EXPECT_NE(check_llama_view(v).message().find("5 used per token"), std::string::npos);
    v = good;
    v.layers[1].moe->gate_exps.n_out = 3 * 256;  // one expert short
    EXPECT_NE(check_llama_view(v).message().find("layer 1 ffn_gate_exps has shape [768, 128] (rows, row length), "
                                                 "expected [1024, 128]"),
              std::string::npos)
        << check_llama_view(v).message();
    v = good;
    v.layers[0].moe->router.data = nullptr;
    EXPECT_NE(check_llama_view(v).message().find("layer 0 ffn_gate_inp (router) is missing"), std::string::npos);
    v = good;
    v.hp.moe.reset();  // experts in a layer of a model without expert parameters
    EXPECT_NE(check_llama_view(v).message().find("layer 0 has experts, and the model no expert parameters"),
              std::string::npos);
    v = good;
    v.hp.moe->n_shared = 1;  // shared experts announced, their tensors absent
    EXPECT_NE(check_llama_view(v).message().find("layer 0 ffn_gate_shexp is missing"), std::string::npos)
        << check_llama_view(v).message();
}

TEST(cuda_upload, float_weights_pass_as_views_and_tied_output_is_one_matrix) {
    auto m = make_tiny_model(ggml_type::f32, true);
    auto up = prepare_cuda_upload(m->view, cuda_runner_params{});
    ASSERT_TRUE(up.ok()) << up.message();
    const troupe_cuda_model_desc& d = up.value()->desc;
    EXPECT_EQ(d.struct_size, sizeof d);
    EXPECT_TRUE(up.value()->storage.empty());
    EXPECT_EQ(d.layers[1].wk.data, m->view.layers[1].wk.data);
    EXPECT_EQ(d.layers[1].wk.type, TROUPE_CUDA_F32);
    EXPECT_EQ(d.layers[1].wk.n_out, 16);
    EXPECT_EQ(d.output.data, d.token_embd.data);
    EXPECT_EQ(d.rope_n_rot, 8);  // rope_dims 0: the whole head
    EXPECT_EQ(d.kv_type, TROUPE_CUDA_F32);
    EXPECT_EQ(d.max_kv_tokens, 32 * 64);
}

TEST(cuda_upload, quantized_weights_are_dequantized_exactly_to_f32_or_rounded_to_f16) {
    auto m = make_tiny_model(ggml_type::q8_0, false);
    const weight_view& w = m->view.layers[0].w_up;  // [64 rows, 32]
    std::vector<float> expected(static_cast<size_t>(w.n_in * w.n_out));
    for (int64_t r = 0; r < w.n_out; ++r) {
        ref::dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_stride, &expected[r * w.n_in],
                            w.n_in);
    }
    for (cuda_weight_type to : {cuda_weight_type::f32, cuda_weight_type::f16}) {
        cuda_runner_params p;
        p.dequantize_to = to;
        auto up = prepare_cuda_upload(m->view, p);
        ASSERT_TRUE(up.ok()) << up.message();
        const troupe_cuda_matrix& g = up.value()->desc.layers[0].w_up;
        ASSERT_EQ(g.n_in, 32);
        ASSERT_EQ(g.n_out, 64);
        for (size_t i = 0; i < expected.size(); ++i) {
            if (to == cuda_weight_type::f32) {
                ASSERT_EQ(g.type, TROUPE_CUDA_F32);
                ASSERT_EQ(static_cast<const float*>(g.data)[i], expected[i]) << i;
            } else {
                ASSERT_EQ(g.type, TROUPE_CUDA_F16);
                ASSERT_EQ(static_cast<const uint16_t*>(g.data)[i], fp32_to_fp16(expected[i])) << i;
            }
        }
        EXPECT_EQ(up.value()->desc.layers[0].attn_norm.type, TROUPE_CUDA_F32);
    }
}

TEST(cuda_upload, a_weight_type_without_kernels_is_refused_by_name) {
    auto m = make_tiny_model(ggml_type::f32, false);
    m->view.layers[1].w_down.type = ggml_type::q5_1;  // rows of 64: two whole blocks, only the type is wrong
    m->view.layers[1].w_down.row_stride = row_bytes(ggml_type::q5_1, 64);
    ASSERT_TRUE(check_llama_view(m->view).ok());
    auto up = prepare_cuda_upload(m->view, cuda_runner_params{});
    ASSERT_FALSE(up.ok());
    EXPECT_EQ(up.message(),
              "tiny.gguf: layer 1 w_down is Q5_1: the CUDA backend takes F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q2_K, Q3_K, "
              "Q4_K, Q5_K and "
              "Q6_K weights, and no quant plugin was loaded for cuda");
}

TEST(cuda_library, a_missing_backend_is_reported_with_the_path_looked_at) {
    auto lib = cuda_library::load("/nonexistent/backends");
    ASSERT_FALSE(lib.ok());
    EXPECT_NE(lib.message().find("/nonexistent/backends/libtroupe_cuda.so not found"), std::string::npos)
        << lib.message();

    auto m = make_tiny_model(ggml_type::f32, false);
    cuda_runner_params p;
    p.backend_dir = "/nonexistent/backends";
    auto runner = make_cuda_runner(m->view, p);
    ASSERT_FALSE(runner.ok());
    EXPECT_NE(runner.message().find("/nonexistent/backends/libtroupe_cuda.so not found"), std::string::npos);
}

TEST(cuda_library, the_built_backend_loads_speaks_this_abi_and_answers_discovery) {
    if (!cuda_library::locate().ok()) GTEST_SKIP() << cuda_library::locate().message();
    auto lib = cuda_library::load();
    ASSERT_TRUE(lib.ok()) << lib.message();
    const troupe_cuda_ops& ops = lib.value()->ops();
    EXPECT_EQ(ops.abi_version, TROUPE_CUDA_ABI_VERSION);
    EXPECT_EQ(ops.struct_size, sizeof(troupe_cuda_ops));
    EXPECT_NE(std::string(ops.build_info).find("troupe_cuda abi 1"), std::string::npos) << ops.build_info;
    EXPECT_EQ(cuda_library::load().value().get(), lib.value().get()) << "a second load returns the same library";

    int32_t n = -1;
    const char* e = ops.device_count(&n);
    if (testing::nvidia_device_node_present()) {
        ASSERT_EQ(e, nullptr) << e;
        ASSERT_GE(n, 1);
        troupe_cuda_device_info info{};
        ASSERT_EQ(ops.device_info(0, &info), nullptr);
        EXPECT_GT(std::string(info.name).size(), 0u);
        EXPECT_GE(info.cc_major, 7);
        EXPECT_GT(info.total_bytes, 0u);
    } else {
        ASSERT_NE(e, nullptr) << "device_count succeeded on a machine without /dev/nvidia*";
        EXPECT_EQ(n, 0);
        EXPECT_GT(std::string(e).size(), 10u);
        troupe_cuda_context* ctx = nullptr;
        EXPECT_NE(ops.context_create(0, 2, &ctx), nullptr);
        EXPECT_EQ(ctx, nullptr);
    }
}

TEST(cuda_runner, without_a_gpu_make_cuda_runner_fails_fast_with_a_reason_and_one_fallback_log_line) {
    if (testing::nvidia_device_node_present()) GTEST_SKIP() << "this machine has an NVIDIA device";
    auto m = make_tiny_model(ggml_type::f32, false);
    const auto t0 = std::chrono::steady_clock::now();
    auto runner = make_cuda_runner(m->view, cuda_runner_params{});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(runner.ok());
    EXPECT_LT(seconds, 10.0);
    const std::string& why = runner.message();
    EXPECT_TRUE(why.find("libtroupe_cuda.so not found") != std::string::npos ||
                why.find("no NVIDIA driver") != std::string::npos || why.find("CUDA") != std::string::npos)
        << why;

    std::vector<std::string> lines;
    set_log_sink([&](log_level level, std::string_view component, std::string_view message) {
        lines.push_back(std::string(log_level_name(level)) + " " + std::string(component) + ": " +
                        std::string(message));
    });
    log_cuda_fallback(why);
    set_log_sink(nullptr);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0], "warn cuda: no GPU found (" + why + "); falling back to the CPU");

    auto devices = cuda_devices();
    ASSERT_FALSE(devices.ok());
    EXPECT_EQ(devices.message(), why);
}

// Stands in for the CPU runner in the fallback test.
class fake_cpu_runner final : public model_runner {
public:
    std::string description() const override { return "fake cpu"; }
    int32_t n_vocab() const override { return 50; }
    int32_t n_ctx() const override { return 64; }
    kv_geometry kv() const override { return {16, 4}; }
    size_t kv_bytes_per_token() const override { return 0; }
    status forward(const forward_batch&, forward_output&) override { return {}; }
};

TEST(cuda_runner, device_cuda_without_a_gpu_gives_the_cpu_runner_after_one_log_line) {
    if (testing::nvidia_device_node_present()) GTEST_SKIP() << "this machine has an NVIDIA device";
    auto m = make_tiny_model(ggml_type::f32, false);
    int cpu_calls = 0;
    std::vector<std::string> lines;
    set_log_sink([&](log_level, std::string_view component, std::string_view message) {
        lines.push_back(std::string(component) + ": " + std::string(message));
    });
    auto runner =
        make_cuda_runner_or_cpu(m->view, cuda_runner_params{}, [&]() -> result<std::unique_ptr<model_runner>> {
            ++cpu_calls;
            return std::unique_ptr<model_runner>(std::make_unique<fake_cpu_runner>());
        });
    set_log_sink(nullptr);
    ASSERT_TRUE(runner.ok()) << runner.message();
    EXPECT_EQ(runner.value()->description(), "fake cpu");
    EXPECT_EQ(cpu_calls, 1);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0].rfind("cuda: no GPU found (", 0), 0u) << lines[0];
    EXPECT_NE(lines[0].find("); falling back to the CPU"), std::string::npos) << lines[0];
}

// With a GPU there, a model it cannot hold (here a KV pool of 2^30 blocks) is an error naming the device: a CPU
// fallback would run it under a warning that says no GPU was found.
TEST(cuda_runner, with_a_gpu_a_model_it_cannot_run_is_an_error_not_a_cpu_fallback) {
    TROUPE_REQUIRE_GPU();
    auto m = make_tiny_model(ggml_type::f32, false);
    cuda_runner_params params;
    params.n_blocks = 1 << 30;
    int cpu_calls = 0;
    auto runner = make_cuda_runner_or_cpu(m->view, params, [&]() -> result<std::unique_ptr<model_runner>> {
        ++cpu_calls;
        return std::unique_ptr<model_runner>(std::make_unique<fake_cpu_runner>());
    });
    EXPECT_FALSE(runner.ok());
    EXPECT_EQ(cpu_calls, 0);
    EXPECT_NE(runner.message().find("cannot run this model: "), std::string::npos) << runner.message();
    EXPECT_NE(runner.message().find("--device cpu"), std::string::npos) << runner.message();

    // The failed allocation is reported once: the next kernel on this thread does not inherit it.
    troupe_cuda_context* ctx = nullptr;
    const troupe_cuda_ops& ops = testing::cuda_ops();
    const char* e = ops.context_create(0, 2, &ctx);
    ASSERT_EQ(e, nullptr) << e;
    const std::vector<float> x(64, 1.0f), w(64, 1.0f);
    std::vector<float> y(64);
    e = ops.test_rms_norm(ctx, x.data(), w.data(), y.data(), 1, 64, 1e-5f);
    EXPECT_EQ(e, nullptr) << e;
    ops.context_destroy(ctx);
}

TEST(cuda_runner, without_a_gpu_the_check_of_what_must_run_on_it_is_not_consulted) {
    if (testing::nvidia_device_node_present()) GTEST_SKIP() << "this machine has an NVIDIA device";
    auto m = make_tiny_model(ggml_type::f32, false);
    int checks = 0;
    auto runner = make_cuda_runner_or_cpu(
        m->view, cuda_runner_params{},
        []() -> result<std::unique_ptr<model_runner>> {
            return std::unique_ptr<model_runner>(std::make_unique<fake_cpu_runner>());
        },
        [&] {
            ++checks;
            return status(make_error("plugin kv/int8: cannot run on the cuda backend"));
        });
    ASSERT_TRUE(runner.ok()) << runner.message();
    EXPECT_EQ(runner.value()->description(), "fake cpu");
    EXPECT_EQ(checks, 0);
}

}  // namespace
}  // namespace troupe
