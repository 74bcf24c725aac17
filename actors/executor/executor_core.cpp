#include "actors/executor/executor_core.h"

#include "core/result.h"

namespace troupe {

executor_core::executor_core(std::shared_ptr<model_runner> runner, draft_proposer_fn draft)
    : runner_(std::move(runner)), draft_(std::move(draft)) {
    TROUPE_ASSERT(runner_ != nullptr, "executor needs a model runner");
}

void executor_core::retire(const std::vector<int64_t>& seq_ids) {
    for (int64_t id : seq_ids) seqs_.erase(id);
}

step_done executor_core::run(const step_plan& plan) {
    step_done done;
    done.step_id = plan.step_id;
    const int32_t n_vocab = runner_->n_vocab();

    batch_.seqs.resize(plan.seqs.size());
    drafts_.resize(plan.seqs.size());
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
        const step_sequence& q = plan.seqs[i];
        auto it = seqs_.find(q.seq_id);
        if (it == seqs_.end()) {
            TROUPE_ASSERT(q.params != nullptr, "step plan without sampling params");
            it = seqs_.emplace(q.seq_id, sequence_state{sampler(*q.params), {}}).first;
        }
        auto& history = it->second.history;
        if (static_cast<int32_t>(history.size()) < q.pos0) {
            done.error = "sequence " + std::to_string(q.seq_id) + " starts at position " + std::to_string(q.pos0) +
                         " but the executor knows only " + std::to_string(history.size()) + " positions";
            return done;
        }
        history.resize(q.pos0);
        history.insert(history.end(), q.tokens.begin(), q.tokens.end());

        auto& drafts = drafts_[i];
        drafts.clear();
        if (draft_ && q.max_draft > 0 && q.sample) {
            drafts = draft_(q.seq_id, history, q.max_draft);
            if (static_cast<int32_t>(drafts.size()) > q.max_draft) drafts.resize(q.max_draft);
            for (size_t j = 0; j < drafts.size(); ++j) {
                if (drafts[j] < 0 || drafts[j] >= n_vocab) {
                    drafts.resize(j);
                    break;
                }
            }
        }
        sequence_step& step = batch_.seqs[i];
        step.seq_id = q.seq_id;
        step.tokens.assign(q.tokens.begin(), q.tokens.end());
        step.tokens.insert(step.tokens.end(), drafts.begin(), drafts.end());
        step.pos0 = q.pos0;
        step.block_table.assign(q.block_table->begin(), q.block_table->end());
        step.all_logits = !drafts.empty();
    }

    status st = runner_->forward(batch_, output_);
    if (!st.ok()) {
        done.error = st.message();
        return done;
    }
    TROUPE_ASSERT(output_.n_rows.size() == plan.seqs.size(), "forward returned rows for a different batch");

    done.results.resize(plan.seqs.size());
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
        const step_sequence& q = plan.seqs[i];
        sequence_result& r = done.results[i];
        r.seq_id = q.seq_id;
        if (q.sample) {
            sample_sequence(i, seqs_.at(q.seq_id), drafts_[i], static_cast<int32_t>(q.tokens.size()), r);
        }
        r.t_sampled = steady_clock::now();
    }
    return done;
}

void executor_core::sample_sequence(size_t index, sequence_state& s, std::span<const int32_t> drafts, int32_t n_inputs,
                                    sequence_result& r) {
    // With all_logits the input rows come first: the last input's row predicts the first draft.
    const int32_t base = drafts.empty() ? 0 : n_inputs - 1;
    r.n_drafted = static_cast<int32_t>(drafts.size());
    for (size_t j = 0; j < drafts.size(); ++j) {
        auto row = output_.row(index, base + static_cast<int32_t>(j));
        const int32_t d = drafts[j];
        if (s.smp.greedy()) {
            int32_t t = s.smp.sample(row, s.history);
            if (t != d) {
                r.tokens.push_back(t);
                return;
            }
        } else {
            s.smp.distribution(row, s.history, probs_);
            if (s.smp.uniform() >= probs_[d]) {
                probs_[d] = 0.0f;
                double sum = 0;
                for (float p : probs_) sum += p;
                TROUPE_ASSERT(sum > 0, "rejected a draft token that had all the probability");
                for (float& p : probs_) p = static_cast<float>(p / sum);
                r.tokens.push_back(s.smp.draw(probs_));
                return;
            }
        }
        r.tokens.push_back(d);
        r.n_accepted++;
        s.history.push_back(d);
    }
    r.tokens.push_back(s.smp.sample(output_.row(index, base + static_cast<int32_t>(drafts.size())), s.history));
}

}  // namespace troupe
