#include "actors/executor/executor_core.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/log/log.h"
#include "core/result.h"

namespace troupe {

executor_core::executor_core(std::shared_ptr<model_runner> runner, std::shared_ptr<speculator> spec,
                             std::function<std::string(int32_t)> piece)
    : runner_(std::move(runner)), spec_(std::move(spec)), piece_(std::move(piece)) {
    TROUPE_ASSERT(runner_ != nullptr, "executor needs a model runner");
}

void executor_core::retire(const std::vector<int64_t>& seq_ids) {
    for (int64_t id : seq_ids) {
        if (auto it = seqs_.find(id); it != seqs_.end()) end_speculation(id, it->second, sequence_end::finished);
        seqs_.erase(id);
        runner_->forget(id);
    }
}

void executor_core::end_speculation(int64_t seq_id, sequence_state& s, sequence_end why) {
    if (!s.speculating) return;
    s.speculating = false;
    spec_->end(seq_id, why);
}

namespace {

// The first failures of a speculator in full, then one line per thousand: drafts only change speed, so a broken
// speculator must not fail requests, nor flood the log.
void log_speculator_failure(const speculator& spec, const std::string& what, int64_t& n_failures) {
    if (n_failures++ < 10 || n_failures % 1000 == 0) {
        TROUPE_LOG_WARN("executor", "speculator %s failed (%lld failures so far; the step runs without drafts): %s",
                        spec.name().c_str(), static_cast<long long>(n_failures), what.c_str());
    }
}

// Keeps the nodes before the first that the runner could not take (a token outside the vocabulary, a parent that is
// not an earlier node) and at most max_nodes: a prefix of a topological order is still a tree.
void cut_at_first_bad_node(draft_tree& tree, int32_t max_nodes, int32_t n_vocab) {
    size_t keep = std::min(tree.size(), static_cast<size_t>(std::max(0, max_nodes)));
    for (size_t i = 0; i < keep; ++i) {
        const bool bad_token = tree.tokens[i] < 0 || tree.tokens[i] >= n_vocab;
        const bool bad_parent = tree.parents[i] < -1 || tree.parents[i] >= static_cast<int32_t>(i);
        if (bad_token || bad_parent) keep = i;
    }
    if (keep == tree.size()) return;
    if (!tree.q.empty()) tree.q.resize(keep * static_cast<size_t>(n_vocab));
    tree.tokens.resize(keep);
    tree.parents.resize(keep);
}

}  // namespace

void executor_core::propose(const step_plan& plan) {
    requests_.clear();
    request_seq_.clear();
    const int32_t max_nodes = spec_->max_nodes();
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
        const step_sequence& q = plan.seqs[i];
        if (q.max_draft <= 0 || !q.sample || max_nodes <= 0) continue;
        const sequence_state& s = seqs_.at(q.seq_id);
        if (s.smp.constrained()) continue;  // the grammar's state follows sampled tokens only, not drafts
        draft_request r;
        r.seq_id = q.seq_id;
        r.tokens = s.history;
        r.n_new = static_cast<int32_t>(q.tokens.size());
        r.max_nodes = std::min(q.max_draft, max_nodes);
        r.max_depth = r.max_nodes;
        r.temperature = s.smp.greedy() ? 0.0f : s.smp.params().temperature;
        r.block_table = *q.block_table;
        r.block_size = runner_->kv().block_size;
        requests_.push_back(r);
        request_seq_.push_back(i);
    }
    if (requests_.empty()) return;
    proposals_.resize(requests_.size());
    if (status st = spec_->propose(requests_, proposals_); !st.ok()) {
        log_speculator_failure(*spec_, st.message(), n_spec_failures_);
        return;
    }
    const auto n_vocab = static_cast<size_t>(runner_->n_vocab());
    for (size_t r = 0; r < requests_.size(); ++r) {
        draft_tree& tree = drafts_[request_seq_[r]];
        std::swap(tree, proposals_[r]);
        cut_at_first_bad_node(tree, requests_[r].max_nodes, runner_->n_vocab());
        if (!runner_->supports_trees()) keep_first_path(tree, n_vocab);
        if (tree.empty()) continue;
        sequence_step& step = batch_.seqs[request_seq_[r]];
        step.tokens.insert(step.tokens.end(), tree.tokens.begin(), tree.tokens.end());
        step.n_draft = static_cast<int32_t>(tree.size());
        if (!tree.is_chain()) step.tree_parents = tree.parents;
        step.all_logits = true;
    }
}

step_done executor_core::run(const step_plan& plan) {
    const time_point t_start = steady_clock::now();
    step_done done;
    done.step_id = plan.step_id;

    batch_.seqs.resize(plan.seqs.size());
    batch_.step_id = plan.step_id;
    drafts_.resize(plan.seqs.size());
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
        const step_sequence& q = plan.seqs[i];
        auto it = seqs_.find(q.seq_id);
        if (it == seqs_.end()) {
            TROUPE_ASSERT(q.params != nullptr, "step plan without sampling params");
            it = seqs_.emplace(q.seq_id, sequence_state{sampler(*q.params), {}, false, -1, {}}).first;
        }
        sequence_state& s = it->second;
        auto& history = s.history;
        if (q.context && static_cast<int32_t>(history.size()) < q.pos0 &&
            static_cast<int32_t>(q.context->size()) >= q.pos0) {
            history.assign(q.context->begin(), q.context->begin() + q.pos0);
        }
        if (static_cast<int32_t>(history.size()) < q.pos0) {
            done.error = "sequence " + std::to_string(q.seq_id) + " starts at position " + std::to_string(q.pos0) +
                         " but the executor knows only " + std::to_string(history.size()) + " positions";
            return done;
        }
        // A sequence that starts over below what it had (preempted, recomputed) lost its KV rows.
        if (static_cast<int32_t>(history.size()) > q.pos0) end_speculation(q.seq_id, s, sequence_end::preempted);
        history.resize(q.pos0);
        history.insert(history.end(), q.tokens.begin(), q.tokens.end());
        if (q.n_sampled_inputs > 0) {
            // Planned while the previous step ran: its last input is the token sampled there.
            if (q.n_sampled_inputs != 1 || q.tokens.empty() || s.last_sampled < 0) {
                done.error = "sequence " + std::to_string(q.seq_id) + ": a plan made ahead asks for " +
                             std::to_string(q.n_sampled_inputs) + " sampled inputs; the executor has " +
                             (s.last_sampled < 0 ? "none" : "one");
                return done;
            }
            history.back() = s.last_sampled;
        }
        if (spec_ && !s.speculating) {
            if (status st = spec_->begin(q.seq_id, history); st.ok()) {
                s.speculating = true;
            } else {
                log_speculator_failure(*spec_, st.message(), n_spec_failures_);
            }
        }

        drafts_[i].clear();
        sequence_step& step = batch_.seqs[i];
        step.seq_id = q.seq_id;
        step.tokens.assign(history.end() - static_cast<std::ptrdiff_t>(q.tokens.size()), history.end());
        step.pos0 = q.pos0;
        step.block_table.assign(q.block_table->begin(), q.block_table->end());
        if (q.more_tables) {
            step.more_tables = *q.more_tables;
        } else {
            step.more_tables.clear();
        }
        // A chunk of a prompt whose logprobs are asked for: every row's logits, each predicting the next token.
        step.all_logits = q.prompt && q.pos0 + 1 < static_cast<int32_t>(q.prompt->size());
        step.n_draft = 0;
        step.tree_parents.clear();
    }
    for (const step_sequence& q : plan.seqs) {
        // Choices forking at this sample: their own samplers, the parent's history (the prompt).
        for (const step_fork& f : q.forks) {
            TROUPE_ASSERT(f.params != nullptr, "step plan forks without sampling params");
            if (auto old = seqs_.find(f.seq_id); old != seqs_.end()) {
                end_speculation(f.seq_id, old->second, sequence_end::preempted);
            }
            seqs_.insert_or_assign(f.seq_id,
                                   sequence_state{sampler(*f.params), seqs_.at(q.seq_id).history, false, -1, {}});
        }
    }
    if (spec_) {
        const time_point t_propose = steady_clock::now();
        propose(plan);
        done.propose_s = std::chrono::duration<double>(steady_clock::now() - t_propose).count();
    }

    const time_point t_forward = steady_clock::now();
    status st = runner_->forward(batch_, output_);
    done.forward_s = std::chrono::duration<double>(steady_clock::now() - t_forward).count();
    if (!st.ok()) {
        done.error = st.message();
        return done;
    }
    TROUPE_ASSERT(output_.n_rows.size() == plan.seqs.size(), "forward returned rows for a different batch");

    fetch_masks(plan);
    done.results.resize(plan.seqs.size());
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
        const step_sequence& q = plan.seqs[i];
        sequence_result& r = done.results[i];
        r.seq_id = q.seq_id;
        if (q.prompt) {
            sequence_state& s = seqs_.at(q.seq_id);
            prompt_logprobs_of(i, s, q);
            if (q.sample) r.prompt_logprobs = s.prompt_logprobs;
        }
        if (q.sample) {
            if (status sst = sample_sequence(i, seqs_.at(q.seq_id), q, r); !sst.ok()) {
                done.error = sst.message();
                return done;
            }
            for (const step_fork& f : q.forks) r.forks.push_back(sample_fork(i, q, f, r));
        }
        r.t_sampled = steady_clock::now();
    }
    done.t_end = steady_clock::now();
    done.step_s = std::chrono::duration<double>(done.t_end - t_start).count();
    return done;
}

void executor_core::fetch_masks(const step_plan& plan) {
    // Grouped by constraint (one per schema), so each group's missing masks are computed once per step.
    std::vector<std::pair<const grammar::token_constraint*, std::vector<sampler*>>> groups;
    for (const step_sequence& q : plan.seqs) {
        if (!q.sample) continue;
        auto add = [&](sampler& smp) {
            if (!smp.constrained()) return;
            const grammar::token_constraint* c = smp.params().constraint.get();
            auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == c; });
            if (it == groups.end()) it = groups.insert(groups.end(), {c, {}});
            it->second.push_back(&smp);
        };
        add(seqs_.at(q.seq_id).smp);
        for (const step_fork& f : q.forks) add(seqs_.at(f.seq_id).smp);
    }
    std::vector<const grammar::grammar_state*> states;
    for (auto& [c, samplers] : groups) {
        states.clear();
        for (sampler* smp : samplers) states.push_back(&smp->constraint_state());
        auto masks = c->masks_for(states);
        for (size_t k = 0; k < samplers.size(); ++k) samplers[k]->set_next_mask(std::move(masks[k]));
    }
}

token_logprobs executor_core::logprobs_of(std::span<const float> row, const sequence_state& s, int32_t token,
                                          int32_t k) {
    s.smp.penalized(row, s.history, logp_);
    return normalized_logprobs(token, k);
}

void executor_core::prompt_logprobs_of(size_t index, sequence_state& s, const step_sequence& q) {
    const std::vector<int32_t>& prompt = *q.prompt;
    const auto n_prompt = static_cast<int32_t>(prompt.size());
    if (s.prompt_logprobs.size() != prompt.size()) {
        s.prompt_logprobs.assign(prompt.size(), {});
        s.prompt_logprobs[0].token = prompt[0];  // nothing before it: no logprob
        if (piece_) s.prompt_logprobs[0].piece = piece_(prompt[0]);
    }
    // Row r is the input at pos0 + r; its logits predict position pos0 + r + 1. Reported on the model's own
    // distribution (no penalties: the prompt was not sampled).
    if (!batch_.seqs[index].all_logits) return;  // a one-token prompt: nothing to predict
    const int32_t n_inputs = output_.n_rows[index];
    for (int32_t r = 0; r < n_inputs; ++r) {
        const int32_t target = q.pos0 + r + 1;
        if (target >= n_prompt) break;
        auto row = output_.row(index, r);
        logp_.assign(row.begin(), row.end());
        s.prompt_logprobs[static_cast<size_t>(target)] =
            normalized_logprobs(prompt[static_cast<size_t>(target)], std::max(q.logprobs, 0));
    }
}

token_logprobs executor_core::normalized_logprobs(int32_t token, int32_t k) {
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

sequence_result executor_core::sample_fork(size_t index, const step_sequence& q, const step_fork& f,
                                           const sequence_result& parent) {
    sequence_state& s = seqs_.at(f.seq_id);
    // The row of the prompt's last input, as the parent's first sample (which had no drafts).
    const int32_t base = batch_.seqs[index].all_logits ? static_cast<int32_t>(q.tokens.size()) - 1 : 0;
    const auto row = output_.row(index, base);
    sequence_result r;
    r.seq_id = f.seq_id;
    const int32_t t = s.smp.sample(row, s.history);
    if (f.logprobs >= 0) r.logprobs.push_back(logprobs_of(row, s, t, f.logprobs));
    r.tokens.push_back(t);
    r.prompt_logprobs = parent.prompt_logprobs;
    r.t_sampled = steady_clock::now();
    s.last_sampled = t;
    return r;
}

status executor_core::sample_sequence(size_t index, sequence_state& s, const step_sequence& q, sequence_result& r) {
    const draft_tree& tree = drafts_[index];
    const auto n_inputs = static_cast<int32_t>(q.tokens.size());
    // With drafts every row has logits: the inputs' first, then one per node; the last input's row predicts the
    // roots. Without, the one row is the last input's.
    const int32_t base = batch_.seqs[index].all_logits ? n_inputs - 1 : 0;
    auto row_after = [&](int32_t node) { return output_.row(index, base + 1 + node); };
    auto emit = [&](std::span<const float> row, int32_t t) {
        if (q.logprobs >= 0) r.logprobs.push_back(logprobs_of(row, s, t, q.logprobs));
        r.tokens.push_back(t);
    };
    nodes_.clear();
    if (tree.empty()) {
        auto row = row_after(-1);
        emit(row, s.smp.sample(row, s.history));
    } else {
        // Logprobs are reported on the history each token was chosen after: that of the accepted path so far.
        const size_t n_history = s.history.size();
        const draft_verdict v = verifier_.verify(tree, row_after, s.smp, s.history);
        int32_t parent = -1;
        for (size_t k = 0; k < v.path.size(); ++k) {
            s.history.resize(n_history + k);
            emit(row_after(parent), tree.tokens[static_cast<size_t>(v.path[k])]);
            parent = v.path[k];
        }
        s.history.resize(n_history);
        for (int32_t node : v.path) s.history.push_back(tree.tokens[static_cast<size_t>(node)]);
        emit(row_after(parent), v.token);
        r.n_drafted = tree_depth(tree);
        r.n_draft_nodes = static_cast<int32_t>(tree.size());
        r.n_accepted = static_cast<int32_t>(v.path.size());
        nodes_ = v.path;
        if (!tree.is_chain()) {
            if (status st = runner_->keep_tree_path(batch_.seqs[index], v.path); !st.ok()) return st;
        }
    }
    s.last_sampled = r.tokens.back();
    nodes_.push_back(-1);
    if (spec_ && s.speculating) {
        if (status st = spec_->accepted(q.seq_id, r.tokens, nodes_); !st.ok()) {
            log_speculator_failure(*spec_, st.message(), n_spec_failures_);
            end_speculation(q.seq_id, s, sequence_end::finished);
        }
    }
    return {};
}

}  // namespace troupe
