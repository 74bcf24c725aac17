// The host side of the CUDA graph's plugin calls (backend ABI revision 6), without a GPU: which matrices
// prepare_cuda_upload hands to a quant plugin (every product matrix of a type it claims, not the token embedding nor
// the norms), the callback the backend calls for their products (the plugin op gets the device pointers and the
// stream), and a plugin failure coming back as the backend's message.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/backend/cuda_upload.h"
#include "tests/cuda/cuda_test_support.h"

namespace troupe {
namespace {

struct fake_prepared final : prepared_weight {
    explicit fake_prepared(int64_t n) : n_(n) {}
    size_t n_bytes() const override { return static_cast<size_t>(n_); }
    int64_t n_;
};

// Claims one type; records the products it is asked for on a stream.
class stream_op final : public quant_op {
public:
    explicit stream_op(ggml_type claimed) : claimed_(claimed) {}
    std::string name() const override { return "quant/stream_test"; }
    bool claims(ggml_type type) const override { return type == claimed_; }
    result<std::shared_ptr<const prepared_weight>> prepare(const weight_view& w) override {
        n_prepared++;
        return std::shared_ptr<const prepared_weight>(std::make_shared<fake_prepared>(w.n_in * w.n_out));
    }
    status matmul(const prepared_weight&, const float*, float*, int64_t, const parallel_for_fn&) override {
        return make_error("the CUDA graph never calls the CPU product");
    }
    status matmul_on_stream(const prepared_weight& w, const float* x, float* y, int64_t n_tokens,
                            void* stream) override {
        if (fail) return make_error("out of device memory");
        calls.push_back({static_cast<const fake_prepared&>(w).n_, x, y, n_tokens, stream});
        return {};
    }
    struct call {
        int64_t weight_elems;
        const float* x;
        float* y;
        int64_t n_tokens;
        void* stream;
    };
    std::vector<call> calls;
    int n_prepared = 0;
    bool fail = false;

private:
    ggml_type claimed_;
};

TEST(cuda_upload_plugins, a_quant_plugin_takes_every_product_matrix_of_its_type_but_the_embedding) {
    auto tiny = testing::make_tiny_model(ggml_type::q8_0, /*tied_output=*/false);
    auto op = std::make_shared<stream_op>(ggml_type::q8_0);
    cuda_runner_params params;
    params.quant = {op};
    auto up = prepare_cuda_upload(tiny->view, params);
    ASSERT_TRUE(up.ok()) << up.message();
    const int32_t n_layers = tiny->view.hp.n_layers;
    EXPECT_EQ(op->n_prepared, 7 * n_layers + 1);  // q, k, v, o, gate, up, down per layer, and the output matrix
    EXPECT_EQ(up.value()->externals.size(), static_cast<size_t>(7 * n_layers + 1));
    const troupe_cuda_layer& l0 = up.value()->layers[0];
    for (const troupe_cuda_matrix* m : {&l0.wq, &l0.wk, &l0.wv, &l0.wo, &l0.w_gate, &l0.w_up, &l0.w_down}) {
        EXPECT_EQ(m->type, TROUPE_CUDA_EXTERNAL);
    }
    EXPECT_EQ(l0.attn_norm.type, TROUPE_CUDA_F32);
    EXPECT_NE(up.value()->desc.token_embd.type, TROUPE_CUDA_EXTERNAL);  // rows are read: the backend's own copy
    EXPECT_EQ(up.value()->desc.output.type, TROUPE_CUDA_EXTERNAL);

    // The backend's call: device pointers and the lane's stream go to the op as they are.
    const auto* ext = static_cast<const troupe_cuda_external_matrix*>(l0.wq.data);
    ASSERT_EQ(ext->struct_size, sizeof(troupe_cuda_external_matrix));
    EXPECT_EQ(ext->device_bytes, static_cast<uint64_t>(l0.wq.n_in * l0.wq.n_out));
    float x = 0, y = 0;
    int stream = 0;
    EXPECT_EQ(ext->matmul(ext->ctx, &x, &y, 3, &stream), nullptr);
    ASSERT_EQ(op->calls.size(), 1u);
    EXPECT_EQ(op->calls[0].x, &x);
    EXPECT_EQ(op->calls[0].y, &y);
    EXPECT_EQ(op->calls[0].n_tokens, 3);
    EXPECT_EQ(op->calls[0].stream, &stream);

    op->fail = true;
    const char* e = ext->matmul(ext->ctx, &x, &y, 3, &stream);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(std::string(e), tiny->view.name + ": layer 0 wq (quant/stream_test): out of device memory");
}

TEST(cuda_upload_plugins, a_plugin_that_claims_other_types_leaves_the_backends_own_types_to_the_backend) {
    auto tiny = testing::make_tiny_model(ggml_type::q8_0, false);
    auto op = std::make_shared<stream_op>(ggml_type::q4_1);  // claims something else
    cuda_runner_params params;
    params.quant = {op};
    auto up = prepare_cuda_upload(tiny->view, params);
    ASSERT_TRUE(up.ok()) << up.message();  // Q8_0: the backend dequantizes it itself
    EXPECT_EQ(op->n_prepared, 0);
    EXPECT_TRUE(up.value()->externals.empty());
    EXPECT_EQ(up.value()->layers[0].wq.type, TROUPE_CUDA_F16);
}

}  // namespace
}  // namespace troupe
