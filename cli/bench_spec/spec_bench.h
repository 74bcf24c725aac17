// spec_bench: `troupe bench` with a spec plugin. Batch-1 generation over the same prompts through the executor
// (executor_core: the engine's own propose -> forward -> verify path, without the actors around it), once
// without the speculator and once with it, alternated rep by rep; prints tokens/s both ways, the speed-up, the
// acceptance length and acceptance per draft position, the measured draft and verification costs against the
// target's step, the speed-up those predict and the efficiency (spec_figures.h defines each), beside the
// bandwidth bound measured in the same run.
#pragma once

#include <string>
#include <vector>

#include "core/config/engine_config.h"

namespace troupe::bench {

struct spec_bench_options {
    int32_t n_gen = 128;               // tokens generated per prompt
    int32_t reps = 3;                  // repetitions of both runs; the fastest of each is reported
    float temperature = 0;             // 0: greedy (the outputs must then be identical, and are checked)
    std::vector<std::string> prompts;  // texts, tokenized with BOS
};

// 0 on success; prints the error and returns non-zero otherwise.
int run_spec_bench(const engine_config& config, const spec_bench_options& options);

}  // namespace troupe::bench
