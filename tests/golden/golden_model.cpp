#include "tests/golden/golden_model.h"

#include "core/model/cpu_llama.h"
#include "kernels/ref/attention.h"

namespace troupe::testing {
namespace {

class ref_attention final : public attention_op {
public:
    std::string name() const override { return "ref"; }
    status forward(const attention_call& call, const parallel_for_fn&) override {
        ref::attention(call);
        return {};
    }
};

}  // namespace

result<golden_model> load_golden_model(const std::string& path) {
    auto file = gguf::gguf_file::open(path);
    if (!file.ok()) return file.err();
    auto tok = tokenizer::from_gguf(**file);
    if (!tok.ok()) return tok.err();
    auto weights = bind_llama_weights(*file);
    if (!weights.ok()) return weights.err();
    cpu_llama_params params;
    params.attention = std::make_shared<ref_attention>();
    params.max_seqs = 1;
    auto runner = cpu_llama::create(std::move(*weights), params);
    if (!runner.ok()) return runner.err();
    return golden_model{*tok, std::move(*runner)};
}

}  // namespace troupe::testing
