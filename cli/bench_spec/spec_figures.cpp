#include "cli/bench_spec/spec_figures.h"

#include <algorithm>

namespace troupe::bench {
namespace {

template <typename F>
double mean_of(const std::vector<spec_step_record>& steps, F field) {
    if (steps.empty()) return 0;
    double sum = 0;
    for (const auto& s : steps) sum += field(s);
    return sum / static_cast<double>(steps.size());
}

}  // namespace

int64_t spec_run::n_tokens() const {
    int64_t n = 0;
    for (const auto& s : steps) n += s.n_tokens;
    return n;
}

double spec_run::tokens_per_s() const {
    return wall_s > 0 ? static_cast<double>(n_tokens()) / wall_s : 0;
}

spec_figures compute_spec_figures(const spec_run& plain, const spec_run& spec) {
    spec_figures f;
    f.tokens_per_s_plain = plain.tokens_per_s();
    f.tokens_per_s_spec = spec.tokens_per_s();
    f.speedup = f.tokens_per_s_plain > 0 ? f.tokens_per_s_spec / f.tokens_per_s_plain : 0;
    f.tau = spec.steps.empty() ? 0 : static_cast<double>(spec.n_tokens()) / static_cast<double>(spec.steps.size());
    f.mean_depth = mean_of(spec.steps, [](const auto& s) { return s.depth; });
    f.mean_nodes = mean_of(spec.steps, [](const auto& s) { return s.n_nodes; });

    int32_t max_depth = 0;
    for (const auto& s : spec.steps) max_depth = std::max(max_depth, s.depth);
    f.accept_at.assign(static_cast<size_t>(max_depth), 0.0);
    f.n_at.assign(static_cast<size_t>(max_depth), 0);
    std::vector<int64_t> reached(static_cast<size_t>(max_depth), 0);
    for (const auto& s : spec.steps) {
        for (int32_t k = 1; k <= s.depth; ++k) {
            f.n_at[static_cast<size_t>(k - 1)]++;
            if (s.n_accepted >= k) reached[static_cast<size_t>(k - 1)]++;
        }
    }
    for (size_t k = 0; k < f.accept_at.size(); ++k) {
        if (f.n_at[k] > 0) f.accept_at[k] = static_cast<double>(reached[k]) / static_cast<double>(f.n_at[k]);
    }

    f.step_plain_s = mean_of(plain.steps, [](const auto& s) { return s.step_s; });
    f.forward_plain_s = mean_of(plain.steps, [](const auto& s) { return s.forward_s; });
    f.step_spec_s = mean_of(spec.steps, [](const auto& s) { return s.step_s; });
    f.forward_spec_s = mean_of(spec.steps, [](const auto& s) { return s.forward_s; });
    f.propose_s = mean_of(spec.steps, [](const auto& s) { return s.propose_s; });
    if (f.step_plain_s > 0) {
        f.c_draft = f.propose_s / f.step_plain_s;
        f.c_verify = (f.forward_spec_s - f.forward_plain_s) / f.step_plain_s;
        f.predicted = f.tau / (1 + f.c_draft + f.c_verify);
        f.ideal = f.tau / (1 + f.c_draft);
        f.efficiency = f.predicted > 0 ? f.speedup / f.predicted : 0;
    }
    return f;
}

}  // namespace troupe::bench
