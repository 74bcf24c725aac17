// The multiply-adds troupe bench sets prefill against its peak: per prompt token the layers' matrices, and the output
// matrix only where logits are asked for (a prompt's last token). Counting the output for every prompt token had
// reported rand10M's prefill (vocabulary 32000 x dim 256 = 8.2M multiply-adds against the layers' 1.6M) at 245% of the
// FMA peak.
#include <gtest/gtest.h>

#include "core/loader/model_loader.h"
#include "core/model/cpu_llama.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"

namespace troupe {
namespace {

TEST(macs_accounting, the_output_matrix_is_counted_apart_from_the_layers) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K-Q8_0.gguf");
    auto m = load_model(testing::golden_config(path, testing::golden_setup::builtin_quantized));
    ASSERT_TRUE(m.ok()) << m.message();
    ASSERT_NE(m->cpu, nullptr);
    const llama_hparams& hp = m->cpu->hparams();
    const int64_t output = static_cast<int64_t>(hp.n_vocab) * hp.dim;
    EXPECT_EQ(m->cpu->matmul_macs_per_token() - m->cpu->matmul_macs_per_token(false), output);
    // The Q8_0 output matrix in the quantized recipe: its multiply-adds are int8 dot products, counted apart too.
    EXPECT_EQ(m->cpu->int8_macs_per_token() - m->cpu->int8_macs_per_token(false, false), output);
    int64_t layers = 0;
    const int64_t kv = static_cast<int64_t>(hp.n_kv_heads) * hp.head_dim;
    for (int32_t il = 0; il < hp.n_layers; ++il)
        layers += 2 * static_cast<int64_t>(hp.dim) * hp.q_width() + 2 * hp.dim * kv +
                  3 * static_cast<int64_t>(hp.dim) * hp.ffn_dim;
    EXPECT_EQ(m->cpu->matmul_macs_per_token(false), layers);
}

}  // namespace
}  // namespace troupe
