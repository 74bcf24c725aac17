// Swap preemption on the CUDA runner: KV blocks copied to host memory and back (model_read_blocks /
// model_write_blocks of the backend ABI). A sequence swapped out, its device blocks overwritten by another
// sequence, and swapped back into other blocks decodes as if it had never left; bad swaps fail with a
// message and lose nothing; the host buffer has the layout cuda_backend_abi.h documents. The loader tests
// run everywhere (a fake revision-1 backend, the built backend's table); the others skip without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend/cuda_library.h"
#include "core/backend/cuda_runner.h"
#include "core/backend/cuda_upload.h"
#include "core/backend/llama_view_of.h"
#include "core/log/log.h"
#include "tests/common/shared_data.h"
#include "tests/cuda/cuda_test_support.h"

namespace troupe {
namespace {

using testing::logits_row;
using testing::max_abs_diff;

constexpr float kSwapTolerance = 1e-4f;  // as the batching test: same kernels, same shapes, copied rows

// A prompt of n tokens of stories260K's vocabulary (512), starting with BOS; `salt` makes another one.
std::vector<int32_t> prompt_of(int32_t n, int32_t salt) {
    std::vector<int32_t> t{1};
    for (int32_t i = 1; i < n; ++i) t.push_back(3 + (salt * 37 + i * 11) % 500);
    return t;
}

TEST(cuda_swap_abi, the_built_backend_has_the_block_read_and_write_ops_of_revision_2_and_the_row_copy_of_3) {
    if (!cuda_library::locate().ok()) GTEST_SKIP() << cuda_library::locate().message();
    auto lib = cuda_library::load();
    ASSERT_TRUE(lib.ok()) << lib.message();
    const troupe_cuda_ops& ops = lib.value()->ops();
    EXPECT_TRUE(TROUPE_CUDA_OPS_HAS(&ops, model_read_blocks));
    EXPECT_TRUE(TROUPE_CUDA_OPS_HAS(&ops, model_write_blocks));
    EXPECT_TRUE(lib.value()->check_swap_ops().ok()) << lib.value()->check_swap_ops().message();
    EXPECT_TRUE(TROUPE_CUDA_OPS_HAS(&ops, model_copy_rows));
    EXPECT_NE(std::string(ops.build_info).find("revision " + std::to_string(TROUPE_CUDA_ABI_REVISION)),
              std::string::npos)
        << ops.build_info;
}

// tests/cuda/fake_backend.c built twice: a revision-1 table (loads, no swap) and one shorter than that.
TEST(cuda_swap_abi, a_revision_1_backend_loads_but_refuses_swap_naming_what_it_lacks) {
    auto lib = cuda_library::load(TROUPE_FAKE_REV1_BACKEND_DIR);
    ASSERT_TRUE(lib.ok()) << lib.message();
    EXPECT_EQ(lib.value()->ops().struct_size, TROUPE_CUDA_OPS_MIN_SIZE);
    EXPECT_FALSE(TROUPE_CUDA_OPS_HAS(&lib.value()->ops(), model_read_blocks));
    const status s = lib.value()->check_swap_ops();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.message(), std::string(TROUPE_FAKE_REV1_BACKEND_DIR) +
                               "/libtroupe_cuda.so (fake troupe_cuda abi 1 revision 1, op table of " +
                               std::to_string(TROUPE_CUDA_OPS_MIN_SIZE) +
                               " bytes) has no model_read_blocks / model_write_blocks: swapping KV blocks to host "
                               "memory needs backend ABI 1 revision 2 or later; rebuild the backend");
}

TEST(cuda_swap_abi, a_table_shorter_than_revision_1_is_refused_with_both_sizes) {
    auto lib = cuda_library::load(TROUPE_FAKE_SHORT_BACKEND_DIR);
    ASSERT_FALSE(lib.ok());
    EXPECT_EQ(lib.message(), std::string(TROUPE_FAKE_SHORT_BACKEND_DIR) +
                                 "/libtroupe_cuda.so speaks CUDA backend ABI 1 (op table of " +
                                 std::to_string(TROUPE_CUDA_OPS_MIN_SIZE - sizeof(void*)) +
                                 " bytes); this troupe speaks ABI 1 (op table of " +
                                 std::to_string(TROUPE_CUDA_OPS_MIN_SIZE) + " to " +
                                 std::to_string(sizeof(troupe_cuda_ops)) + " bytes): rebuild the backend");
}

// The ABI ops on a tiny random model of 8 blocks (2 layers: 4 pools), with no runner in between.
TEST(cuda_swap_abi, blocks_written_from_the_host_read_back_in_the_documented_layout_in_any_order) {
    TROUPE_REQUIRE_GPU();
    const troupe_cuda_ops& ops = testing::cuda_ops();
    auto tiny = testing::make_tiny_model(ggml_type::f32, true);
    cuda_runner_params params;
    params.block_size = 4;
    params.n_blocks = 8;
    auto up = prepare_cuda_upload(tiny->view, params);
    ASSERT_TRUE(up.ok()) << up.message();
    troupe_cuda_context* ctx = nullptr;
    ASSERT_EQ(ops.context_create(0, 2, &ctx), nullptr);
    const std::unique_ptr<troupe_cuda_context, void (*)(troupe_cuda_context*)> own_ctx(ctx, ops.context_destroy);
    troupe_cuda_model* model = nullptr;
    const char* made = ops.model_create(ctx, &up.value()->desc, &model);
    ASSERT_EQ(made, nullptr) << made;
    const std::unique_ptr<troupe_cuda_model, void (*)(troupe_cuda_model*)> own_model(model, ops.model_destroy);
    troupe_cuda_model_info info{};
    ops.model_info(model, &info);
    const int32_t n_pools = 2 * tiny->view.hp.n_layers;
    const size_t block_words = info.kv_bytes / info.n_blocks / n_pools / sizeof(uint32_t);
    ASSERT_EQ(block_words, 4u * tiny->view.hp.n_kv_heads * tiny->view.hp.head_dim);

    // Word w of entry i of pool p says where it came from: (p, i, w).
    const std::vector<int32_t> written{5, 1, 2, 6};
    const auto n_written = static_cast<int32_t>(written.size());
    std::vector<uint32_t> host(n_pools * written.size() * block_words);
    for (int32_t p = 0; p < n_pools; ++p) {
        for (int32_t i = 0; i < n_written; ++i) {
            for (size_t w = 0; w < block_words; ++w)
                host[(p * written.size() + i) * block_words + w] = (p << 24) | (i << 16) | static_cast<uint32_t>(w);
        }
    }
    const char* e = ops.model_write_blocks(model, 1, written.data(), n_written, host.data());
    EXPECT_EQ(e, nullptr) << e;

    // Read back subsets in other orders (1, 2 is a run of consecutive ids; 6, 5 and 2, 1 are not).
    for (const std::vector<int32_t>& read : {std::vector<int32_t>{6}, {1, 2}, {6, 5, 2, 1}, {2, 1, 6, 5}}) {
        const auto n_read = static_cast<int32_t>(read.size());
        std::vector<uint32_t> back(n_pools * read.size() * block_words, 0xffffffffu);
        e = ops.model_read_blocks(model, 0, read.data(), n_read, back.data());
        EXPECT_EQ(e, nullptr) << e;
        for (int32_t p = 0; p < n_pools; ++p) {
            for (int32_t j = 0; j < n_read; ++j) {
                const auto i = std::find(written.begin(), written.end(), read[j]) - written.begin();
                for (size_t w = 0; w < block_words; ++w) {
                    ASSERT_EQ(back[(p * read.size() + j) * block_words + w],
                              host[(p * written.size() + i) * block_words + w])
                        << "pool " << p << ", block " << read[j] << ", word " << w;
                }
            }
        }
    }

    const int32_t bad[] = {0, 8};
    e = ops.model_read_blocks(model, 1, bad, 2, host.data());
    ASSERT_NE(e, nullptr);
    EXPECT_STREQ(e, "read of KV blocks to the host: block id 8 (entry 1 of 2) outside the pool of 8 blocks");
    e = ops.model_write_blocks(model, 1, written.data(), 2, nullptr);
    ASSERT_NE(e, nullptr);
    EXPECT_STREQ(e, "write of KV blocks from the host: 2 blocks without a block list or a host buffer");
    e = ops.model_read_blocks(model, 7, written.data(), 1, host.data());
    ASSERT_NE(e, nullptr);
    EXPECT_STREQ(e, "lane 7 does not exist (the context has 2)");
}

std::string no_copy_message(int64_t seq_id) {
    return "cuda swap_in of sequence " + std::to_string(seq_id) +
           ": no copy in host memory (never swapped out, already swapped in, or forgotten)";
}

struct swap_case {
    bool kv_f16;
    int32_t n_lanes;  // 1: swaps share the compute lane; 2: they run on the KV copy lane
};

cuda_runner_params swap_pool(const swap_case& c) {
    cuda_runner_params p;
    p.block_size = 16;
    p.n_blocks = 256;
    p.kv_f16 = c.kv_f16;
    p.n_lanes = c.n_lanes;
    return p;
}

TEST(cuda_swap, a_sequence_swapped_out_overwritten_and_swapped_into_other_blocks_decodes_as_if_never_interrupted) {
    TROUPE_REQUIRE_GPU();
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    auto weights = testing::load_llama_weights(model_path);
    ASSERT_TRUE(weights.ok()) << weights.message();
    for (const swap_case c : {swap_case{false, 2}, swap_case{true, 1}}) {
        SCOPED_TRACE(std::string(c.kv_f16 ? "F16" : "F32") + " KV, " + std::to_string(c.n_lanes) + " lanes");
        auto made = cuda_runner::create(llama_view_of(weights.value()), swap_pool(c));
        ASSERT_TRUE(made.ok()) << made.message();
        cuda_runner& gpu = *made.value();
        ASSERT_TRUE(gpu.separate_kv_memory());
        ASSERT_EQ(gpu.kv().block_size, 16);

        // 40 tokens: two full blocks and part of a third.
        const std::vector<int32_t> a = prompt_of(40, 1), b = prompt_of(40, 2);
        const int32_t next = 432;
        forward_output out;

        // Uninterrupted: prefill and one decode step in blocks of their own.
        ASSERT_TRUE(gpu.forward({{sequence_step{1, a, 0, {100, 101, 102}, false}}}, out).ok());
        ASSERT_TRUE(gpu.forward({{sequence_step{1, {next}, 40, {100, 101, 102}, false}}}, out).ok());
        const std::vector<float> expected = logits_row(out, 0);

        // Interrupted: prefill in 3, 4, 7; swap out; b overwrites those blocks.
        const std::vector<int32_t> first{3, 4, 7};
        ASSERT_TRUE(gpu.forward({{sequence_step{1, a, 0, first, false}}}, out).ok());
        ASSERT_TRUE(gpu.swap_out(1, first, 40).ok());
        EXPECT_EQ(gpu.host_kv_bytes(), 3 * 16 * gpu.kv_bytes_per_token());
        ASSERT_TRUE(gpu.forward({{sequence_step{2, b, 0, first, false}}}, out).ok());
        ASSERT_TRUE(gpu.forward({{sequence_step{1, {next}, 40, first, false}}}, out).ok());
        EXPECT_GT(max_abs_diff(logits_row(out, 0), expected), 10 * kSwapTolerance)
            << "b's prefill left a's rows in blocks 3, 4, 7: this test would pass without swapping";

        // Back into other blocks, out of order, with one more in the table than the rows fill.
        const std::vector<int32_t> second{50, 20, 21, 22};
        ASSERT_TRUE(gpu.swap_in(1, second, 40).ok());
        EXPECT_EQ(gpu.host_kv_bytes(), 0u);
        ASSERT_TRUE(gpu.forward({{sequence_step{1, {next}, 40, second, false}}}, out).ok());
        const std::vector<float> resumed = logits_row(out, 0);
        EXPECT_LT(max_abs_diff(resumed, expected), kSwapTolerance);
        EXPECT_EQ(std::max_element(resumed.begin(), resumed.end()) - resumed.begin(),
                  std::max_element(expected.begin(), expected.end()) - expected.begin());
    }
}

TEST(cuda_swap, bad_swaps_fail_with_a_message_and_keep_the_host_copy_until_it_is_swapped_in_or_forgotten) {
    TROUPE_REQUIRE_GPU();
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    auto weights = testing::load_llama_weights(model_path);
    ASSERT_TRUE(weights.ok()) << weights.message();
    auto made = cuda_runner::create(llama_view_of(weights.value()), swap_pool({false, 2}));
    ASSERT_TRUE(made.ok()) << made.message();
    cuda_runner& gpu = *made.value();
    const std::vector<int32_t> blocks{3, 4, 5};
    forward_output out;
    ASSERT_TRUE(gpu.forward({{sequence_step{5, prompt_of(40, 3), 0, blocks, false}}}, out).ok());

    struct bad_call {
        bool to_host;
        int64_t seq_id;
        std::vector<int32_t> blocks;
        int32_t n_tokens;
        std::string message;
    };
    const std::vector<bad_call> before_swap_out = {
        {false, 5, blocks, 40, no_copy_message(5)},
        {true, 5, {3, 4}, 40, "cuda swap_out of sequence 5: 40 tokens fill 3 blocks of 16, the table has 2"},
        {true,
         5,
         {3, 9999, 5},
         40,
         "cuda swap_out of sequence 5: read of KV blocks to the host: block id 9999 (entry 1 of 3) outside the pool "
         "of 256 blocks"},
        {true, 5, blocks, -1, "cuda swap_out of sequence 5: -1 tokens"},
    };
    const auto check = [&](const std::vector<bad_call>& calls) {
        for (const bad_call& b : calls) {
            const status s =
                b.to_host ? gpu.swap_out(b.seq_id, b.blocks, b.n_tokens) : gpu.swap_in(b.seq_id, b.blocks, b.n_tokens);
            ASSERT_FALSE(s.ok()) << b.message;
            EXPECT_EQ(s.message(), b.message);
        }
    };
    check(before_swap_out);
    EXPECT_EQ(gpu.host_kv_bytes(), 0u);

    std::vector<std::string> lines;
    const log_level level = current_log_level();
    set_log_level(log_level::debug);
    set_log_sink([&](log_level, std::string_view component, std::string_view message) {
        lines.push_back(std::string(component) + ": " + std::string(message));
    });
    ASSERT_TRUE(gpu.swap_out(5, blocks, 40).ok());
    set_log_sink(nullptr);
    set_log_level(level);
    const uint64_t held = gpu.host_kv_bytes();
    EXPECT_EQ(held, 3 * 16 * gpu.kv_bytes_per_token());
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0].rfind("cuda: swap_out of sequence 5: 40 tokens in 3 blocks, ", 0), 0u) << lines[0];
    EXPECT_NE(lines[0].find(" MiB; host holds "), std::string::npos) << lines[0];

    const std::vector<bad_call> after_swap_out = {
        {false, 5, {20, 21}, 40, "cuda swap_in of sequence 5: 40 tokens fill 3 blocks of 16, the table has 2"},
        {false, 5, {20, 21, 22}, 39, "cuda swap_in of sequence 5: asked for 39 tokens, the host copy holds 40"},
        {false,
         5,
         {20, -1, 22},
         40,
         "cuda swap_in of sequence 5: write of KV blocks from the host: block id -1 (entry 1 of 3) outside the pool "
         "of 256 blocks"},
        {false, 6, {20, 21, 22}, 40, no_copy_message(6)},
    };
    check(after_swap_out);
    EXPECT_EQ(gpu.host_kv_bytes(), held) << "a failed swap_in keeps the copy";

    ASSERT_TRUE(gpu.swap_in(5, std::vector<int32_t>{20, 21, 22}, 40).ok());
    EXPECT_EQ(gpu.host_kv_bytes(), 0u);
    check({{false, 5, {20, 21, 22}, 40, no_copy_message(5)}});

    // A sequence that ends while swapped out: forget() drops its copy; forgetting others changes nothing.
    ASSERT_TRUE(gpu.swap_out(7, std::vector<int32_t>{20, 21, 22}, 33).ok());
    EXPECT_EQ(gpu.host_kv_bytes(), held);
    gpu.forget(8);
    EXPECT_EQ(gpu.host_kv_bytes(), held);
    gpu.forget(7);
    EXPECT_EQ(gpu.host_kv_bytes(), 0u);
    check({{false, 7, {20, 21, 22}, 33, no_copy_message(7)}});
}

}  // namespace
}  // namespace troupe
