#include "actors/kv_allocator/kv_allocator_core.h"

#include <algorithm>
#include <string>

#include "core/result.h"

namespace troupe {

kv_allocator_core::kv_allocator_core(kv_allocator_params params)
    : params_(params), pool_(params.kv, params.group_windows, params.prefix_caching) {
    TROUPE_ASSERT(params_.n_ctx > 0, "the KV allocator needs the context length");
}

kv_pool_view kv_allocator_core::view() const {
    const block_pool_stats st = pool_.stats();
    kv_pool_view v;
    v.block_size = pool_.block_size();
    v.n_blocks = pool_.n_blocks();
    v.n_used = st.n_used;
    v.n_cached = st.n_cached;
    v.n_free = st.n_free;
    v.n_prefix_queries = st.n_prefix_queries;
    v.n_prefix_hits = st.n_prefix_hits;
    return v;
}

int32_t kv_allocator_core::pending(const running_seq& s) const {
    return static_cast<int32_t>(tokens_.at(s.id).size()) - s.n_computed;
}

std::span<const int32_t> kv_allocator_core::known(int64_t seq_id) const {
    const std::vector<int32_t>& toks = tokens_.at(seq_id);
    const auto it = n_unknown_.find(seq_id);
    const size_t n_unknown = it == n_unknown_.end() ? 0 : static_cast<size_t>(it->second);
    return std::span<const int32_t>(toks).first(toks.size() - n_unknown);
}

bool kv_allocator_core::unshare(int64_t seq_id, int32_t pos, kv_step_grant& g) {
    if (!pool_.shares(seq_id, pos)) return true;
    bool ok = true;
    for (const block_copy& copy : pool_.copy_on_write(seq_id, pos, &ok)) {
        g.copy_src.push_back(copy.src);
        g.copy_dst.push_back(copy.dst);
    }
    return ok;
}

void kv_allocator_core::add(running_seq& s, int32_t n_tokens, int32_t max_draft, kv_step_grant& g) {
    pool_.commit(s.id, known(s.id), s.n_computed + n_tokens);
    g.seqs.push_back({s.id, n_tokens, max_draft, std::make_shared<const std::vector<int32_t>>(pool_.table(s.id))});
    if (pool_.n_groups() > 1) {
        g.seqs.back().more_tables = std::make_shared<const std::vector<std::vector<int32_t>>>(pool_.more_tables(s.id));
    }
}

void kv_allocator_core::preempt_last(std::vector<running_seq>& running, std::deque<kv_admit>& candidates,
                                     preemption_mode mode, kv_step_grant& g) {
    const running_seq s = running.back();
    running.pop_back();
    kv_preempted p;
    p.seq_id = s.id;
    // Swap copies one table of every position: a model whose windowed layers released blocks recomputes instead.
    p.swapped = mode == preemption_mode::swap && s.n_computed > 0 && !pool_.windowed();
    if (p.swapped) {
        p.blocks = pool_.table(s.id);
        p.n_computed = s.n_computed;
    }
    pool_.release(s.id);
    kv_admit again;
    again.seq_id = s.id;
    const std::span<const int32_t> toks = known(s.id);
    again.tokens = std::make_shared<const std::vector<int32_t>>(toks.begin(), toks.end());
    again.n_computed = p.swapped ? s.n_computed : 0;
    again.swapped = p.swapped;
    candidates.push_front(std::move(again));
    g.preempted.push_back(std::move(p));
}

bool kv_allocator_core::pass(const kv_step_request& r, std::vector<running_seq>& running,
                             std::deque<kv_admit>& candidates, kv_step_grant& g) {
    int32_t budget = r.token_budget;
    bool preempted = false;

    // 1. Decodes, in running order; blocks run out -> preempt from the back.
    for (size_t i = 0; i < running.size(); ++i) {
        const running_seq s = running[i];
        if (pending(s) != 1 || budget <= 0) continue;
        int32_t max_draft = s.draft_cap > 0 ? std::max(0, std::min(s.draft_cap, budget - 1)) : 0;
        // The last step's draft room held the rows of its rejected drafts: give it back before asking again.
        pool_.shrink(s.id, s.n_computed + 1);
        pool_.slide(s.id, s.n_computed);  // windowed layers: blocks no query from here reads go back first
        bool placed = false;
        while (true) {
            if (unshare(s.id, s.n_computed, g)) {
                if (max_draft > 0 && pool_.allocate(s.id, s.n_computed + 1 + max_draft)) {
                    placed = true;
                    break;
                }
                max_draft = 0;
                if (pool_.allocate(s.id, s.n_computed + 1)) {
                    placed = true;
                    break;
                }
            }
            const bool self = running.back().id == s.id;
            if (self && running.size() == 1) {
                g.failed.push_back({s.id, s.n_computed + 1});
                pool_.release(s.id);
                tokens_.erase(s.id);
                n_unknown_.erase(s.id);
                running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
                --i;
                break;
            }
            preempt_last(running, candidates, r.preemption, g);
            preempted = true;
            if (self) break;
        }
        if (!placed) continue;
        add(running[i], 1, max_draft, g);
        budget -= 1 + max_draft;
    }

    // 2. Prefill chunks: what the budget and the free blocks allow.
    for (running_seq& s : running) {
        const int32_t n_pending = pending(s);
        if (n_pending <= 1 || budget <= 0) continue;
        pool_.slide(s.id, s.n_computed);
        const int32_t chunk = pool_.fits(s.id, s.n_computed, std::min(n_pending, budget));
        if (chunk <= 0) continue;
        pool_.allocate(s.id, s.n_computed + chunk);
        add(s, chunk, 0, g);
        budget -= chunk;
    }

    // 3. Admissions, FCFS, none after a preemption.
    if (r.may_admit && !preempted) {
        while (!candidates.empty()) {
            if (budget <= 0 && !r.admit_without_budget) break;
            const kv_admit& c = candidates.front();
            if (static_cast<int32_t>(running.size()) + c.n_forks >= r.max_running) break;
            const std::vector<int32_t>& toks = *c.tokens;
            const auto n_known = static_cast<int32_t>(toks.size());
            if (pool_.blocks_needed(std::min(n_known + 1, params_.n_ctx)) > pool_.n_blocks()) {
                // It grew past what the whole pool holds (a preempted sequence): it can never resume.
                g.failed.push_back({c.seq_id, n_known + 1});
                candidates.pop_front();
                continue;
            }
            kv_admitted a;
            a.seq_id = c.seq_id;
            running_seq s{c.seq_id, 0, 0};
            if (c.swapped) {
                // Back from host memory: blocks for what was computed, then the copy in before the step.
                if (pool_.blocks_needed(n_known + 1) + c.n_forks * pool_.n_groups() > pool_.n_free()) break;
                pool_.allocate(c.seq_id, c.n_computed);
                a.swapped_in = true;
                a.swap_in_blocks = pool_.table(c.seq_id);
                s.n_computed = c.n_computed;
            } else {
                // Whole blocks only, and at least one token left to run (its logits give the next token).
                const int32_t max_cached = c.no_prefix ? 0 : ((n_known - 1) / pool_.block_size()) * pool_.block_size();
                const prefix_match peek = pool_.peek_prefix(toks, max_cached);
                if (peek.n_pending > 0) break;  // shares a block being computed now: next step
                // Blocks for the whole prompt (and the first sampled token) must be free, so an admitted
                // prefill is not preempted by its own later chunks.
                // Windowed layers hold their window and a step's tokens (chunks of the budget; of one token when
                // even that is more than the pool).
                const int32_t step = pool_.blocks_needed(n_known + 1, budget) <= pool_.n_blocks() ? budget : 1;
                const int32_t need =
                    pool_.blocks_needed(n_known + 1, step, peek.n_tokens) + c.n_forks * pool_.n_groups();
                if (need > pool_.n_free() - peek.n_idle_hits) break;
                const prefix_match m = pool_.match_prefix(c.seq_id, toks, max_cached);
                s.n_computed = m.n_tokens;
                a.n_cached = m.n_tokens;
                pool_.slide(c.seq_id, s.n_computed);
            }
            tokens_[c.seq_id].assign(toks.begin(), toks.end());
            n_unknown_.erase(c.seq_id);
            candidates.pop_front();
            running.push_back(s);
            const int32_t chunk = pool_.fits(s.id, s.n_computed, std::min(n_known - s.n_computed, std::max(0, budget)));
            const bool ok = pool_.allocate(s.id, s.n_computed + chunk);
            TROUPE_ASSERT(ok, "admitted sequence " + std::to_string(s.id) + " but its first chunk does not fit");
            a.n_computed = s.n_computed;
            a.n_blocks = static_cast<int32_t>(pool_.table(s.id).size());
            g.admitted.push_back(std::move(a));
            if (chunk > 0) add(running.back(), chunk, 0, g);
            budget -= chunk;
        }
    }

    if (g.seqs.empty() && running.size() > 1) {
        // Nothing can run: the running prefills wait for blocks held by each other. Free the latest.
        preempt_last(running, candidates, r.preemption, g);
        return false;
    }
    return true;
}

kv_step_grant kv_allocator_core::grant(const kv_step_request& r) {
    kv_step_grant g;
    g.step_id = r.step_id;
    for (const kv_computed& c : r.computed) pool_.computed(c.seq_id, c.n_computed);
    for (const kv_fork& f : r.forks) {
        const auto parent = tokens_.find(f.parent_id);
        if (parent == tokens_.end() || static_cast<int32_t>(parent->second.size()) < f.n_tokens ||
            !pool_.fork(f.parent_id, f.child_id, f.n_tokens)) {
            g.fork_failed.push_back(f.child_id);
            continue;
        }
        tokens_[f.child_id].assign(parent->second.begin(), parent->second.begin() + f.n_tokens);
    }
    for (int64_t id : r.frees) {
        pool_.release(id);
        tokens_.erase(id);
        n_unknown_.erase(id);
    }
    std::vector<running_seq> running;
    running.reserve(r.grows.size());
    for (const kv_grow& w : r.grows) {
        if (std::find(g.fork_failed.begin(), g.fork_failed.end(), w.seq_id) != g.fork_failed.end()) continue;
        // The places of tokens unknown at the last request first take the values now appended.
        auto& toks = tokens_[w.seq_id];
        toks.resize(known(w.seq_id).size());
        toks.insert(toks.end(), w.append.begin(), w.append.end());
        toks.insert(toks.end(), static_cast<size_t>(w.n_unknown), -1);
        if (w.n_unknown > 0) {
            n_unknown_[w.seq_id] = w.n_unknown;
        } else {
            n_unknown_.erase(w.seq_id);
        }
        running.push_back({w.seq_id, w.n_computed, w.draft_cap});
    }
    std::deque<kv_admit> candidates(r.admits.begin(), r.admits.end());
    while (!pass(r, running, candidates, g)) {
    }
    for (const kv_admit& c : candidates) g.deferred.push_back(c.seq_id);
    // A copy for a sequence preempted after it in this grant is moot: its blocks went back.
    size_t n_copies = 0;
    for (size_t i = 0; i < g.copy_dst.size(); ++i) {
        const auto in = [&](const std::vector<int32_t>& t) {
            return std::find(t.begin(), t.end(), g.copy_dst[i]) != t.end();
        };
        const bool held = std::any_of(g.seqs.begin(), g.seqs.end(), [&](const kv_step_seq& q) {
            return in(*q.block_table) ||
                   (q.more_tables && std::any_of(q.more_tables->begin(), q.more_tables->end(), in));
        });
        if (!held) continue;
        g.copy_src[n_copies] = g.copy_src[i];
        g.copy_dst[n_copies++] = g.copy_dst[i];
    }
    g.copy_src.resize(n_copies);
    g.copy_dst.resize(n_copies);
    g.pool = view();
    return g;
}

}  // namespace troupe
