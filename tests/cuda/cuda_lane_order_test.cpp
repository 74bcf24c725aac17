// Each lane owns its stream on the GPU (backend ABI revision 5): the KV allocator's lane swaps blocks on the copy
// stream while the executor's lane runs a step on the compute stream, ordered by events only (the backend's own
// ordering of its lanes is off: cuda_runner::order_steps). A sequence swapped out under a running step, its blocks
// overwritten by another prefill, and swapped back into other blocks leaves the same KV bytes and the same logits as
// a run without swaps. The host side of the ordering is tested without a GPU in tests/actors/test_kv_copy_lane.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "actors/kv_allocator/kv_copy_lane.h"
#include "core/backend/cuda_runner.h"
#include "core/backend/llama_view_of.h"
#include "core/runtime/step_fences.h"
#include "tests/common/shared_data.h"
#include "tests/cuda/cuda_test_support.h"

namespace troupe {
namespace {

using testing::logits_row;
using testing::max_abs_diff;

constexpr float kTolerance = 1e-4f;  // the same kernels on the same batch shapes; only block ids differ

std::vector<int32_t> prompt_of(int32_t n, int32_t salt) {
    std::vector<int32_t> t{1};
    for (int32_t i = 1; i < n; ++i) t.push_back(3 + (salt * 37 + i * 11) % 500);
    return t;
}

std::shared_ptr<const std::vector<int32_t>> table(std::vector<int32_t> blocks) {
    return std::make_shared<const std::vector<int32_t>>(std::move(blocks));
}

cuda_runner_params pool() {
    cuda_runner_params p;
    p.block_size = 16;
    p.n_blocks = 64;
    p.n_lanes = 2;
    return p;
}

// The steps of both runs: the same batches, block ids aside. X decodes throughout; Y is prefilled at step 1 and
// decodes again at step 4; Z is prefilled at step 3 (into Y's old blocks in the swapping run).
struct step_tables {
    std::vector<int32_t> x, y_before, y_after, z;
};

struct run_result {
    std::vector<std::vector<float>> x_logits;  // per step
    std::vector<float> y_logits;               // step 4
    std::vector<std::byte> y_kv, x_kv, z_kv;   // after step 4
};

forward_batch batch(int64_t step_id, std::vector<sequence_step> seqs) {
    forward_batch b;
    b.seqs = std::move(seqs);
    b.step_id = step_id;
    return b;
}

TEST(cuda_lane_order, a_swap_under_a_running_step_leaves_the_kv_bytes_and_logits_of_a_run_without_swaps) {
    TROUPE_REQUIRE_GPU();
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    auto weights = testing::load_llama_weights(model_path);
    ASSERT_TRUE(weights.ok()) << weights.message();
    const std::vector<int32_t> a = prompt_of(40, 1), b = prompt_of(40, 2), c = prompt_of(40, 3);
    const int32_t t1 = 432, t2 = 77, t3 = 300, ty = 123;

    // Without swaps: the backend orders its lanes itself, every sequence keeps its blocks.
    run_result ref;
    {
        auto made = cuda_runner::create(llama_view_of(weights.value()), pool());
        ASSERT_TRUE(made.ok()) << made.message();
        cuda_runner& gpu = *made.value();
        forward_output out;
        const std::vector<int32_t> x{0, 1, 2, 3}, y{4, 5, 6, 7}, z{8, 9, 10};
        ASSERT_TRUE(gpu.forward(batch(1, {{1, a, 0, x}, {2, b, 0, y}}), out).ok());
        ASSERT_TRUE(gpu.forward(batch(2, {{1, {t1}, 40, x}}), out).ok());
        ref.x_logits.push_back(logits_row(out, 0));
        ASSERT_TRUE(gpu.forward(batch(3, {{1, {t2}, 41, x}, {3, c, 0, z}}), out).ok());
        ref.x_logits.push_back(logits_row(out, 0));
        ASSERT_TRUE(gpu.forward(batch(4, {{1, {t3}, 42, x}, {2, {ty}, 40, y}}), out).ok());
        ref.x_logits.push_back(logits_row(out, 0));
        ref.y_logits = logits_row(out, 1);
        ref.y_kv = *gpu.kv_bytes(std::vector<int32_t>{4, 5, 6});
        ref.x_kv = *gpu.kv_bytes(std::vector<int32_t>{0, 1, 2});
        ref.z_kv = *gpu.kv_bytes(std::vector<int32_t>{8, 9, 10});
    }

    // With swaps: lanes ordered by events; Y goes out on the copy lane while step 2 runs, Z takes its blocks, Y comes
    // back into others (out of order) before step 4.
    auto made = cuda_runner::create(llama_view_of(weights.value()), pool());
    ASSERT_TRUE(made.ok()) << made.message();
    std::shared_ptr<cuda_runner> gpu(std::move(made.value()));
    auto fences = std::make_shared<step_fences>();
    auto compute = gpu->lane_stream(lane_role::compute);
    auto copies = gpu->lane_stream(lane_role::kv_copy);
    ASSERT_NE(compute, nullptr);
    ASSERT_NE(copies, nullptr);
    gpu->order_steps(fences);
    kv_copy_lane lane(gpu, copies.get(), fences, gpu->kv().n_blocks);
    const std::vector<int32_t> x{0, 1, 2, 3}, y{4, 5, 6, 7}, y_back{20, 13, 14, 15};
    forward_output out;
    // The executor's side of a step: wait for the grant's copies, run, publish.
    const auto execute = [&](const kv_step_grant& g, forward_batch fb) {
        if (g.copies_done) {
            EXPECT_TRUE(compute->wait(*g.copies_done).ok());
        }
        const status s = gpu->forward(fb, out);
        fences->publish(g.step_id, nullptr);
        return s;
    };

    kv_step_grant g1;
    g1.step_id = 1;
    g1.seqs = {{1, 40, 0, table(x)}, {2, 40, 0, table(y)}};
    lane.run(g1, 0);
    ASSERT_TRUE(execute(g1, batch(1, {{1, a, 0, x}, {2, b, 0, y}})).ok());

    kv_step_grant g2;
    g2.step_id = 2;
    g2.seqs = {{1, 1, 0, table(x)}};
    lane.run(g2, 1);
    std::vector<float> x2;
    std::thread executor([&] {
        ASSERT_TRUE(execute(g2, batch(2, {{1, {t1}, 40, x}})).ok());
        x2 = logits_row(out, 0);
    });
    // Planned while step 2 runs: Y (whose blocks step 1 wrote) goes to host memory, Z is prefilled into its blocks.
    kv_step_grant g3;
    g3.step_id = 3;
    g3.preempted.push_back({2, true, {4, 5, 6}, 40});
    g3.seqs = {{1, 1, 0, table(x)}, {3, 40, 0, table({4, 5, 6})}};
    lane.run(g3, 2);
    executor.join();
    ASSERT_TRUE(g3.preempted[0].swapped);
    ASSERT_NE(g3.copies_done, nullptr);
    EXPECT_LT(max_abs_diff(x2, ref.x_logits[0]), kTolerance);
    ASSERT_TRUE(execute(g3, batch(3, {{1, {t2}, 41, x}, {3, c, 0, {4, 5, 6}}})).ok());
    EXPECT_LT(max_abs_diff(logits_row(out, 0), ref.x_logits[1]), kTolerance);

    kv_step_grant g4;
    g4.step_id = 4;
    g4.admitted.push_back({2, 40, 0, 4, true, y_back, ""});
    g4.seqs = {{1, 1, 0, table(x)}, {2, 1, 0, table(y_back)}};
    lane.run(g4, 3);
    ASSERT_EQ(g4.admitted[0].swap_error, "");
    ASSERT_TRUE(execute(g4, batch(4, {{1, {t3}, 42, x}, {2, {ty}, 40, y_back}})).ok());
    EXPECT_LT(max_abs_diff(logits_row(out, 0), ref.x_logits[2]), kTolerance);
    const std::vector<float> y4 = logits_row(out, 1);
    EXPECT_LT(max_abs_diff(y4, ref.y_logits), kTolerance);
    EXPECT_EQ(std::max_element(y4.begin(), y4.end()) - y4.begin(),
              std::max_element(ref.y_logits.begin(), ref.y_logits.end()) - ref.y_logits.begin());

    // Byte for byte: Y's rows (40 of 48 in three blocks) back in 20, 13, 14; X's never moved; Z's where Y's were.
    auto y_kv = gpu->kv_bytes(std::vector<int32_t>{20, 13, 14});
    ASSERT_TRUE(y_kv.ok()) << y_kv.message();
    const size_t row_bytes = gpu->kv_bytes_per_token() / (2 * weights.value().hp.n_layers);
    const size_t block_bytes = row_bytes * 16;
    // Compare the 40 written rows of each pool (the rest of the last block is whatever the pool held).
    ASSERT_EQ(y_kv->size(), ref.y_kv.size());
    for (size_t pool = 0; pool < y_kv->size() / (3 * block_bytes); ++pool) {
        const size_t at = pool * 3 * block_bytes;
        EXPECT_TRUE(std::equal(y_kv->begin() + at, y_kv->begin() + at + 40 * row_bytes, ref.y_kv.begin() + at))
            << "pool " << pool;
    }
    EXPECT_EQ(*gpu->kv_bytes(std::vector<int32_t>{0, 1, 2}), ref.x_kv);
    EXPECT_EQ(*gpu->kv_bytes(std::vector<int32_t>{4, 5, 6}), ref.z_kv);
    fences->close("test over");
}

}  // namespace
}  // namespace troupe
