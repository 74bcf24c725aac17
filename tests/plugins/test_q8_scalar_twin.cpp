// quant/q8's two builds agree: the SDK-only scalar loops (q8_kernels_scalar.cpp, compiled into this test) against
// the plugin as built in the tree (troupe's kernel library, panels where the CPU has them), on odd shapes in both
// recipes, token counts on both sides of the kernels' dot-product / GEMM switch.
#include <cmath>

#include "plugin_test_support.h"
#include "plugins/quant/q8/q8_kernels.h"

namespace troupe::testing {
namespace {

struct twin_case {
    int64_t n_in, n_out, n_tokens;
    bool int8_activations;
};

TEST(q8_scalar_twin, the_sdk_only_scalar_loops_match_the_plugin_built_on_the_kernel_library) {
    const std::vector<twin_case> cases = {
        {32, 1, 1, false}, {96, 17, 3, false}, {160, 33, 29, false}, {64, 16, 40, false},
        {32, 1, 1, true},  {96, 17, 3, true},  {160, 33, 29, true},  {64, 16, 40, true},
    };
    plugin_host host = real_plugins();
    for (const twin_case& c : cases) {
        SCOPED_TRACE(::testing::Message() << "[" << c.n_out << ", " << c.n_in << "] x " << c.n_tokens << " tokens, "
                                          << (c.int8_activations ? "W8A8" : "W8A16"));
        auto op = host.load_quant("q8", yaml(c.int8_activations ? "{activations: int8}" : "{}"));
        ASSERT_TRUE(op.ok()) << op.message();
        const auto w_float = random_floats(size_t(c.n_out * c.n_in), 21);
        std::vector<q8::block_q8_0> w(size_t(c.n_out * c.n_in / 32));  // [n_out, n_in / 32]
        q8::quantize_rows(TROUPE_TYPE_F32, w_float.data(), size_t(c.n_in) * 4, c.n_in, c.n_in, w.data(), 0, c.n_out);
        const auto x = random_floats(size_t(c.n_tokens * c.n_in), 22);
        const size_t stride = size_t(c.n_in / 32) * sizeof(q8::block_q8_0);

        auto prepared = (*op)->prepare(weight_view{ggml_type::q8_0, w.data(), c.n_in, c.n_out, stride});
        ASSERT_TRUE(prepared.ok()) << prepared.message();
        std::vector<float> by_plugin(size_t(c.n_tokens * c.n_out));
        ASSERT_TRUE((*op)->matmul(**prepared, x.data(), by_plugin.data(), c.n_tokens, threaded_parallel_for(2)).ok());

        std::vector<float> by_scalar(by_plugin.size());
        const q8::parallel_fn inline_fn = [](int64_t n, const q8::range_fn& fn) { fn(0, n); };
        q8::matmul(w.data(), nullptr, 0, c.n_in, c.n_out, stride, x.data(), by_scalar.data(), c.n_tokens, inline_fn,
                   c.int8_activations ? q8::activations::int8 : q8::activations::float32);
        for (size_t i = 0; i < by_plugin.size(); ++i) {
            ASSERT_TRUE(std::isfinite(by_plugin[i])) << i;
            ASSERT_NEAR(by_plugin[i], by_scalar[i], 1e-4f * (1.0f + std::fabs(by_scalar[i]))) << "output " << i;
        }
    }
}

}  // namespace
}  // namespace troupe::testing
