// troupe_greedy_ids: greedy continuations of prompts as token ids, for comparing with another implementation
// (tests/golden/llama_cpp_check/check_greedy.py runs it beside llama.cpp on prompts of one's own). Not a test.
//
//   troupe_greedy_ids MODEL.gguf N_NEW SETUP PROMPT...
//
// SETUP is one of golden_model.h's setups (builtin_quantized: llama.cpp's CPU recipe for every type). For each
// prompt, three lines: "prompt ID ID ..." (with BOS), "greedy ID ID ..." (the prompt as one step, then one token
// per step, as llama.cpp's decode runs it), "first_logits L0 .. L7" (the first step's logits of ids 0..7) and
// "max_logits ..." (each step's largest logit).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/golden/golden_model.h"

namespace {

void print_ids(const char* label, const std::vector<int32_t>& ids) {
    std::printf("%s", label);
    for (int32_t id : ids) std::printf(" %d", id);
    std::printf("\n");
}

void print_floats(const char* label, const std::vector<float>& v) {
    std::printf("%s", label);
    for (float f : v) std::printf(" %.9g", f);
    std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
    using namespace troupe;
    if (argc < 5) {
        std::fprintf(stderr, "usage: %s MODEL.gguf N_NEW SETUP PROMPT...\n", argv[0]);
        return 2;
    }
    const std::string setup_arg = argv[3];
    testing::golden_setup setup = testing::golden_setup::builtin_quantized;
    bool known = false;
    for (auto s : {testing::golden_setup::default_config, testing::golden_setup::builtin_quantized,
                   testing::golden_setup::builtin_float, testing::golden_setup::float_recipe,
                   testing::golden_setup::int8_recipe}) {
        if (setup_arg == testing::setup_name(s)) {
            setup = s;
            known = true;
        }
    }
    const int n_new = std::atoi(argv[2]);
    if (!known || n_new < 1) {
        std::fprintf(stderr,
                     "%s: SETUP must be default_config, builtin_quantized, builtin_float, float_recipe or "
                     "int8_recipe and N_NEW >= 1, got %s and %s\n",
                     argv[0], argv[3], argv[2]);
        return 2;
    }
    auto model = testing::load_golden_model(argv[1], setup);
    if (!model) {
        std::fprintf(stderr, "%s: %s\n", argv[0], model.message().c_str());
        return 1;
    }
    // One sequence at a time: the prompt as one step, then one token per step, in blocks 0.. of the pool.
    const kv_geometry kv = model->runner->kv();
    for (int i = 4; i < argc; ++i) {
        const std::vector<int32_t> prompt = model->tok->encode(argv[i], true);
        const int64_t n_blocks = (static_cast<int64_t>(prompt.size()) + n_new + kv.block_size - 1) / kv.block_size;
        sequence_step step{0, prompt, 0, {}, false};
        for (int32_t b = 0; b < n_blocks; ++b) step.block_table.push_back(b);
        std::vector<int32_t> ids;
        std::vector<float> first(8), top;  // first step's logits 0..7; each step's largest logit
        forward_batch batch;
        forward_output out;
        for (int s = 0; s < n_new; ++s) {
            batch.seqs = {step};
            if (status st = model->runner->forward(batch, out); !st.ok()) {
                std::fprintf(stderr, "%s: %s\n", argv[0], st.message().c_str());
                return 1;
            }
            const auto row = out.row(0);
            const auto best = std::max_element(row.begin(), row.end());
            if (s == 0) std::copy(row.begin(), row.begin() + 8, first.begin());
            top.push_back(*best);
            ids.push_back(static_cast<int32_t>(best - row.begin()));
            step.pos0 += static_cast<int32_t>(step.tokens.size());
            step.tokens = {ids.back()};
        }
        print_ids("prompt", prompt);
        print_ids("greedy", ids);
        print_floats("first_logits", first);
        print_floats("max_logits", top);
    }
    return 0;
}
