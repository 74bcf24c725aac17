// Walks the K/V rows of one sequence and kv head position after position (attention_kernels.h has the
// pool layout), one block table lookup per row and no division: the per-row kv_offset divides by the
// block size, which costs more than a decode step's dot product. Internal linkage: the instruction sets'
// files include it (see attention_online.h).
#pragma once

#include <troupe/plugin.h>

#include <cstddef>
#include <cstdint>

namespace troupe::gqa {
namespace {

struct kv_cursor {
    const troupe_attention_call& call;
    const int32_t* table;
    int32_t kv_head;
    int32_t entry = 0;  // block table entry of the next position
    int32_t row = 0;    // row of the next position within its block

    // A cursor whose next() is the row of `pos` (the table is read only by next()).
    static kv_cursor at(const troupe_attention_call& call, const int32_t* table, int32_t kv_head, int32_t pos) {
        return {call, table, kv_head, pos / call.block_size, pos % call.block_size};
    }

    // Offset in elements of the next position's row in k_pool and v_pool; then moves one position on.
    size_t next() {
        const size_t block_row = static_cast<size_t>(table[entry]) * call.block_size + row;
        if (++row == call.block_size) {
            row = 0;
            ++entry;
        }
        return (block_row * call.n_kv_heads + kv_head) * call.head_dim;
    }
};

}  // namespace
}  // namespace troupe::gqa
