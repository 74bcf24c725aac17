#include "actors/executor/executor_core.h"

#include <algorithm>
#include <cmath>

#include "core/result.h"

namespace troupe {

executor_core::executor_core(std::shared_ptr<model_runner> runner, draft_proposer_fn draft,
                             std::function<std::string(int32_t)> piece)
    : runner_(std::move(runner)), draft_(std::move(draft)), piece_(std::move(piece)) {
    TROUPE_ASSERT(runner_ != nullptr, "executor needs a model runner");
}

void executor_core::retire(const std::vector<int64_t>& seq_ids) {
    for (int64_t id : seq_ids) {
        seqs_.erase(id);
        lost_.erase(id);
        runner_->forget(id);
    }
}

void executor_core::swap(const swap_blocks& m) {
    status st = m.to_host ? runner_->swap_out(m.seq_id, m.blocks, m.n_tokens)
                          : runner_->swap_in(m.seq_id, m.blocks, m.n_tokens);
    if (!st.ok()) lost_[m.seq_id] = st.message();
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
        if (auto lost = lost_.find(q.seq_id); lost != lost_.end()) {
            done.error = "sequence " + std::to_string(q.seq_id) + " lost its KV rows in a swap: " + lost->second;
            return done;
        }
        auto& history = it->second.history;
        if (q.context && static_cast<int32_t>(history.size()) < q.pos0 &&
            static_cast<int32_t>(q.context->size()) >= q.pos0) {
            history.assign(q.context->begin(), q.context->begin() + q.pos0);
        }
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
            sample_sequence(i, seqs_.at(q.seq_id), drafts_[i], static_cast<int32_t>(q.tokens.size()), q.logprobs, r);
        }
        r.t_sampled = steady_clock::now();
    }
    return done;
}

token_logprobs executor_core::logprobs_of(std::span<const float> row, const sequence_state& s, int32_t token,
                                          int32_t k) {
    s.smp.penalized(row, s.history, logp_);
    float max = logp_[0];
    for (float l : logp_) max = std::max(max, l);
    double sum = 0;
    for (float l : logp_) sum += std::exp(static_cast<double>(l - max));
    const auto log_z = static_cast<float>(static_cast<double>(max) + std::log(sum));
    for (float& l : logp_) l -= log_z;
    token_logprobs lp;
    lp.token = token;
    lp.logprob = logp_[static_cast<size_t>(token)];
    if (piece_) lp.piece = piece_(token);
    if (k > 0) {
        k = std::min<int32_t>(k, static_cast<int32_t>(logp_.size()));
        std::vector<int32_t> ids(logp_.size());
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
        std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                          [&](int32_t a, int32_t b) { return logp_[a] != logp_[b] ? logp_[a] > logp_[b] : a < b; });
        for (int32_t i = 0; i < k; ++i) lp.top.emplace_back(ids[i], logp_[static_cast<size_t>(ids[i])]);
    }
    return lp;
}

void executor_core::sample_sequence(size_t index, sequence_state& s, std::span<const int32_t> drafts, int32_t n_inputs,
                                    int32_t logprobs, sequence_result& r) {
    // With all_logits the input rows come first: the last input's row predicts the first draft.
    const int32_t base = drafts.empty() ? 0 : n_inputs - 1;
    r.n_drafted = static_cast<int32_t>(drafts.size());
    auto emit = [&](std::span<const float> row, int32_t t) {
        if (logprobs >= 0) r.logprobs.push_back(logprobs_of(row, s, t, logprobs));
        r.tokens.push_back(t);
    };
    for (size_t j = 0; j < drafts.size(); ++j) {
        auto row = output_.row(index, base + static_cast<int32_t>(j));
        const int32_t d = drafts[j];
        if (s.smp.greedy()) {
            int32_t t = s.smp.sample(row, s.history);
            if (t != d) {
                emit(row, t);
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
                emit(row, s.smp.draw(probs_));
                return;
            }
        }
        emit(row, d);
        r.n_accepted++;
        s.history.push_back(d);
    }
    auto row = output_.row(index, base + static_cast<int32_t>(drafts.size()));
    emit(row, s.smp.sample(row, s.history));
}

}  // namespace troupe
