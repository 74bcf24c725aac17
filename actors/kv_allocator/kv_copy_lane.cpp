#include "actors/kv_allocator/kv_copy_lane.h"

#include <algorithm>

#include "core/log/log.h"

namespace troupe {

kv_copy_lane::kv_copy_lane(std::shared_ptr<model_runner> runner, device_stream* stream,
                           std::shared_ptr<step_fences> fences, int32_t n_blocks)
    : runner_(std::move(runner)),
      stream_(stream),
      fences_(std::move(fences)),
      last_step_(static_cast<size_t>(std::max(n_blocks, 0)), -1) {
    TROUPE_ASSERT(runner_ != nullptr && fences_ != nullptr, "kv_copy_lane needs a runner and the step fences");
}

status kv_copy_lane::order_after_steps(std::span<const int32_t> blocks, int64_t last_sent_step) {
    int64_t step = -1;
    for (int32_t b : blocks) {
        TROUPE_ASSERT(b >= 0 && static_cast<size_t>(b) < last_step_.size(),
                      "KV copy of block " + std::to_string(b) + ": the pool has " + std::to_string(last_step_.size()));
        // A step granted but not sent has run nothing, but a sent one before it may have used the block: the last
        // sent step covers that one (the compute stream runs in order).
        const int64_t last = last_step_[static_cast<size_t>(b)];
        step = std::max(step, std::min(last, last_sent_step));
    }
    // One already waited for is behind us on this in-order stream.
    if (step < 0 || step <= waited_through_) return {};
    auto done = fences_->await(step);
    if (!done.ok()) return done.err();
    if (stream_ != nullptr && *done) {
        if (status s = stream_->wait(**done); !s.ok()) return s;
    }
    waited_through_ = step;
    return {};
}

void kv_copy_lane::run(kv_step_grant& g, int64_t last_sent_step) {
    if (!g.error.empty()) return;
    bool copied = false;
    for (kv_preempted& p : g.preempted) {
        if (!p.swapped) continue;
        const std::span<const int32_t> blocks(p.blocks);
        status s = order_after_steps(blocks, last_sent_step);
        if (s.ok()) s = runner_->swap_out(p.seq_id, blocks, p.n_computed);
        if (!s.ok()) {
            TROUPE_LOG_WARN("kv_allocator", "swap-out of sequence %lld failed, it will be recomputed: %s",
                            static_cast<long long>(p.seq_id), s.message().c_str());
            p.swapped = false;
            continue;
        }
        copied = true;
    }
    for (kv_admitted& a : g.admitted) {
        if (!a.swapped_in) continue;
        const std::span<const int32_t> blocks(a.swap_in_blocks);
        status s = order_after_steps(blocks, last_sent_step);
        if (s.ok()) s = runner_->swap_in(a.seq_id, blocks, a.n_computed);
        if (!s.ok()) {
            a.swap_error = "its KV rows were lost in the swap back from host memory: " + s.message();
            continue;
        }
        copied = true;
    }
    if (!g.copy_src.empty()) {
        std::vector<int32_t> blocks(g.copy_src);
        blocks.insert(blocks.end(), g.copy_dst.begin(), g.copy_dst.end());
        status s = order_after_steps(blocks, last_sent_step);
        if (s.ok()) s = runner_->copy_blocks(g.copy_src, g.copy_dst);
        if (!s.ok()) {
            g.error = "copy-on-write of " + std::to_string(g.copy_src.size()) + " KV blocks: " + s.message();
            return;
        }
        // Done here, on this lane: the step plan carries the event, not the copies.
        g.copy_src.clear();
        g.copy_dst.clear();
        copied = true;
    }
    if (copied && stream_ != nullptr) {
        auto e = stream_->record();
        if (e.ok()) {
            last_copy_ = std::move(*e);
        } else {
            // Without the event the step cannot be ordered after the copies: wait for them here instead.
            TROUPE_LOG_WARN("kv_allocator", "recording the copies' event failed (%s); waiting for them",
                            e.message().c_str());
            if (status s = stream_->synchronize(); !s.ok()) {
                g.error = "KV copies on " + stream_->name() + ": " + s.message();
                return;
            }
        }
    }
    g.copies_done = last_copy_;
    note_step(g);
}

void kv_copy_lane::note_step(const kv_step_grant& g) {
    const auto note = [&](const std::vector<int32_t>& table) {
        for (int32_t b : table) {
            if (b >= 0 && static_cast<size_t>(b) < last_step_.size()) last_step_[static_cast<size_t>(b)] = g.step_id;
        }
    };
    for (const kv_step_seq& q : g.seqs) {
        if (q.block_table) note(*q.block_table);
        if (q.more_tables) {
            for (const std::vector<int32_t>& table : *q.more_tables) note(table);  // the other layer groups' blocks
        }
    }
}

}  // namespace troupe
