// grow_agreement: how often a drafter's greedy token is a target's, over story openings (a measuring tool, not a
// test). Used to choose `troupe synth --grow-from`'s default noise and to report the agreement of stories260K with
// its grown targets (README: "Growing a target for speculative decoding").
//
//   grow_agreement TARGET.gguf DRAFTER.gguf [PROMPTS.txt] [N_PROMPTS] [N_NEW]
//
// Each of the first N_PROMPTS lines of PROMPTS.txt (default ../shared/text/prompts.txt, 20 prompts, 48 new tokens)
// is tokenized with the target's tokenizer; the target continues it greedily and the drafter predicts each of those
// tokens from the target's text (greedy_agreement.h). Prints one line per prompt and the total.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/greedy_agreement.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"

int main(int argc, char** argv) {
    namespace testing = troupe::testing;
    if (argc < 3) {
        std::fprintf(stderr, "usage: grow_agreement TARGET.gguf DRAFTER.gguf [PROMPTS.txt] [N_PROMPTS] [N_NEW]\n");
        return 2;
    }
    std::string prompts_path;
    if (argc > 3) {
        prompts_path = argv[3];
    } else if (auto p = testing::shared_file("text/prompts.txt")) {
        prompts_path = *p;
    } else {
        std::fprintf(stderr, "grow_agreement: %s\n", testing::missing_shared_message("text/prompts.txt").c_str());
        return 1;
    }
    const int n_prompts = argc > 4 ? std::stoi(argv[4]) : 20;
    const int n_new = argc > 5 ? std::stoi(argv[5]) : 48;

    auto target = testing::load_golden_model(argv[1]);
    if (!target) {
        std::fprintf(stderr, "grow_agreement: %s\n", target.message().c_str());
        return 1;
    }
    auto drafter = testing::load_golden_model(argv[2]);
    if (!drafter) {
        std::fprintf(stderr, "grow_agreement: %s\n", drafter.message().c_str());
        return 1;
    }
    std::ifstream in(prompts_path);
    if (!in) {
        std::fprintf(stderr, "grow_agreement: cannot read %s\n", prompts_path.c_str());
        return 1;
    }
    std::string line;
    int n_agree = 0, n_total = 0, n_run = 0;
    while (n_run < n_prompts && std::getline(in, line)) {
        if (line.empty()) continue;
        const std::vector<int32_t> ids = target->tok->encode(line, true);
        auto a = testing::greedy_agreement(*target->runner, *drafter->runner, ids, n_new);
        if (!a) {
            std::fprintf(stderr, "grow_agreement: %s\n", a.message().c_str());
            return 1;
        }
        std::printf("%2d/%d  %-50s %s\n", a->n_agree, n_new, line.c_str(),
                    target->tok->decode(a->target_tokens).c_str());
        n_agree += a->n_agree;
        n_total += n_new;
        ++n_run;
    }
    std::printf("agreement: %d of %d greedy tokens (%.1f%%) over %d prompts\n", n_agree, n_total,
                n_total ? 100.0 * n_agree / n_total : 0.0, n_run);
    return 0;
}
