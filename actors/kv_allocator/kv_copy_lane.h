// kv_copy_lane: the KV allocator's lane runs each grant's KV copies (swap-outs of preempted sequences, swap-ins of
// readmitted ones, copy-on-write copies) on its own device stream, ordered against the executor's steps by events:
//
//   compute:  ... step N (writes blocks 3, 4) ─ event E_N ─────────────── wait C ─ step N+1 (blocks 3, 4 reused)
//   copy:                                       wait E_N ─ swap-out 3, 4 ─ event C
//
// - A copy waits for the end of the last sent step that used any block it reads or writes (a swap-out reads what
//   that step wrote; a swap-in or a copy's destination overwrites what it may still read). The allocator knows
//   which step last used each block: it granted them (note_step). The wait is for the step's event, got from
//   step_fences once the executor has enqueued that step. A step the scheduler never sent is not waited for (it
//   would never come); the last sent step stands in for the ones before it that may have used the block.
// - The step the grant plans waits for the grant's last copy event (kv_step_grant::copies_done, carried to the
//   executor in the step plan) before its kernels read or write blocks.
// A CPU runner has no streams: the copies then run on the caller's thread after the steps they wait for returned
// (a CPU step is published when it is over), and copies_done stays null.
//
// Failures: a swap-out that fails turns the preemption into recompute (kv_preempted::swapped = false: the rows
// are computed again); a swap-in that fails loses the rows (kv_admitted::swap_error: the scheduler fails that
// sequence); a copy-on-write copy that fails fails the grant (kv_step_grant::error). Copies made here are cleared
// from the grant (kv_step_grant::copy_src / copy_dst), so nothing downstream makes them again.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "actors/kv_allocator/kv_allocator_msgs.h"
#include "core/model/model_runner.h"
#include "core/runtime/device_stream.h"
#include "core/runtime/step_fences.h"

namespace troupe {

class kv_copy_lane {
public:
    // stream: the allocator lane's device stream (null on the CPU); the runner enqueues its copies there.
    kv_copy_lane(std::shared_ptr<model_runner> runner, device_stream* stream, std::shared_ptr<step_fences> fences,
                 int32_t n_blocks);

    // Runs g's copies as above, sets g.copies_done, then notes the blocks of g's step (g.seqs' tables, every layer
    // group's).
    void run(kv_step_grant& g, int64_t last_sent_step);

    // The last step granted that used the block (-1: none).
    int64_t last_step(int32_t block) const { return last_step_[static_cast<size_t>(block)]; }

private:
    // Enqueues on the stream a wait for the last sent step that used any of blocks; false (with why) when the fences
    // failed (the engine stops).
    status order_after_steps(std::span<const int32_t> blocks, int64_t last_sent_step);
    void note_step(const kv_step_grant& g);

    std::shared_ptr<model_runner> runner_;
    device_stream* stream_;
    std::shared_ptr<step_fences> fences_;
    std::vector<int64_t> last_step_;  // [n_blocks]
    int64_t waited_through_ = -1;     // the stream already waits for the steps up to this one
    // The last copy event: every later step waits for it too (cheap once it has passed), so a step never overtakes a
    // copy whose own step plan was dropped (a plan the scheduler abandoned).
    std::shared_ptr<const device_event> last_copy_;
};

}  // namespace troupe
