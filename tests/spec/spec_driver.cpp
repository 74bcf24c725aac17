#include "tests/spec/spec_driver.h"

#include <algorithm>
#include <string>

namespace troupe::testing {

spec_driver::spec_driver(std::shared_ptr<model_runner> runner, std::shared_ptr<speculator> spec)
    : runner_(std::move(runner)), spec_(spec), core_(runner_, std::move(spec)), block_size_(runner_->kv().block_size) {
    const int32_t n_blocks = runner_->kv().n_blocks;
    for (int32_t b = n_blocks - 1; b >= 0; --b) free_blocks_.push_back(b);
}

result<std::vector<int32_t>> spec_driver::take_blocks(int32_t n) {
    if (n > static_cast<int32_t>(free_blocks_.size())) {
        return make_error("spec_driver: " + std::to_string(n) + " KV blocks wanted, " +
                          std::to_string(free_blocks_.size()) + " free (raise scheduler.max_running_seqs)");
    }
    std::vector<int32_t> out(free_blocks_.end() - n, free_blocks_.end());
    free_blocks_.resize(free_blocks_.size() - static_cast<size_t>(n));
    return out;
}

result<std::shared_ptr<const std::vector<int32_t>>> spec_driver::prefill_shared(std::span<const int32_t> tokens) {
    if (tokens.empty() || tokens.size() % static_cast<size_t>(block_size_) != 0) {
        return make_error("prefill_shared: " + std::to_string(tokens.size()) + " tokens, not whole blocks of " +
                          std::to_string(block_size_));
    }
    auto blocks = take_blocks(static_cast<int32_t>(tokens.size()) / block_size_);
    if (!blocks.ok()) return blocks.err();
    auto table = std::make_shared<const std::vector<int32_t>>(std::move(*blocks));
    step_plan plan;
    plan.step_id = next_step_id_++;
    step_sequence q;
    q.seq_id = next_seq_id_++;
    q.tokens.assign(tokens.begin(), tokens.end());
    q.block_table = table;
    q.params = std::make_shared<const sampling_params>();
    q.sample = false;
    plan.seqs.push_back(std::move(q));
    const step_done done = core_.run(plan);
    if (!done.error.empty()) return make_error("prefill_shared: " + done.error);
    core_.retire({plan.seqs[0].seq_id});
    return table;
}

status spec_driver::run(std::vector<driven_sequence>& seqs, int32_t max_running, drive_stats& stats) {
    struct active {
        size_t index;  // into seqs
        int64_t seq_id;
        std::shared_ptr<const std::vector<int32_t>> table;
        std::vector<int32_t> own_blocks;
        std::shared_ptr<const sampling_params> params;
        std::shared_ptr<const std::vector<int32_t>> context{};  // the shared prefix, on the first step
        bool first = true;
    };
    const int32_t max_nodes = spec_ ? spec_->max_nodes() : 0;
    std::vector<active> running;
    size_t next = 0;
    step_plan plan;
    while (next < seqs.size() || !running.empty()) {
        while (next < seqs.size() && static_cast<int32_t>(running.size()) < max_running) {
            driven_sequence& s = seqs[next];
            s.generated.clear();
            if (static_cast<int32_t>(s.prompt.size()) <= s.n_shared) {
                return make_error("spec_driver: a prompt of " + std::to_string(s.prompt.size()) +
                                  " tokens on a shared prefix of " + std::to_string(s.n_shared));
            }
            const int32_t n_positions = static_cast<int32_t>(s.prompt.size()) + s.n_new + max_nodes + 1;
            const int32_t n_shared_blocks = s.shared_blocks ? static_cast<int32_t>(s.shared_blocks->size()) : 0;
            auto own = take_blocks((n_positions + block_size_ - 1) / block_size_ - n_shared_blocks);
            if (!own.ok()) return own.err();
            active a{next, next_seq_id_++, nullptr, std::move(*own), std::make_shared<const sampling_params>(s.params)};
            auto table = std::make_shared<std::vector<int32_t>>();
            if (s.shared_blocks) *table = *s.shared_blocks;
            table->insert(table->end(), a.own_blocks.begin(), a.own_blocks.end());
            a.table = std::move(table);
            if (s.n_shared > 0) {
                a.context =
                    std::make_shared<const std::vector<int32_t>>(s.prompt.begin(), s.prompt.begin() + s.n_shared);
            }
            running.push_back(std::move(a));
            ++next;
        }
        plan.step_id = next_step_id_++;
        plan.seqs.clear();
        for (const active& a : running) {
            const driven_sequence& s = seqs[a.index];
            step_sequence q;
            q.seq_id = a.seq_id;
            q.block_table = a.table;
            q.params = a.params;
            if (a.first) {
                q.tokens.assign(s.prompt.begin() + s.n_shared, s.prompt.end());
                q.pos0 = s.n_shared;
                q.context = a.context;
            } else {
                q.tokens = {s.generated.back()};
                q.pos0 = static_cast<int32_t>(s.prompt.size() + s.generated.size()) - 1;
            }
            const int32_t left =
                s.drafts_within_n_new ? s.n_new - static_cast<int32_t>(s.generated.size()) - 1 : max_nodes;
            const int32_t cap = s.max_draft > 0 ? std::min(s.max_draft, max_nodes) : max_nodes;
            if (!a.first || s.drafts_on_first_step) q.max_draft = std::max(0, std::min(cap, left));
            plan.seqs.push_back(std::move(q));
        }
        const step_done done = core_.run(plan);
        if (!done.error.empty()) return make_error("step " + std::to_string(plan.step_id) + ": " + done.error);
        ++stats.n_steps;
        std::vector<int64_t> finished;
        for (size_t i = 0; i < running.size(); ++i) {
            active& a = running[i];
            driven_sequence& s = seqs[a.index];
            const sequence_result& r = done.results[i];
            ++stats.n_seq_steps;
            stats.n_draft_nodes += r.n_draft_nodes;
            stats.n_accepted += r.n_accepted;
            stats.n_emitted += static_cast<int64_t>(r.tokens.size());
            s.generated.insert(s.generated.end(), r.tokens.begin(), r.tokens.end());
            a.first = false;
            if (static_cast<int32_t>(s.generated.size()) >= s.n_new) {
                s.generated.resize(static_cast<size_t>(s.n_new));
                finished.push_back(a.seq_id);
                free_blocks_.insert(free_blocks_.end(), a.own_blocks.begin(), a.own_blocks.end());
            }
        }
        if (!finished.empty()) {
            core_.retire(finished);
            std::erase_if(running, [&](const active& a) {
                return std::find(finished.begin(), finished.end(), a.seq_id) != finished.end();
            });
        }
    }
    return {};
}

}  // namespace troupe::testing
