// The K/V write of a step with an instruction set's conversion: every token's k and v rows (float) go into
// the pools at its row (its position, or rows[t] in a tree call), as floats or as halves (kv_type F16, rounded to
// nearest even like the scalar write_kv). Internal linkage: the instruction sets' files include it (see
// attention_online.h).
#pragma once

#include <troupe/plugin.h>

#include <cstring>

#include "attention_kernels.h"

namespace troupe::gqa {
namespace {

// isa must provide: to_halves(dst, src, n).
template <class isa>
void write_kv_rows(const troupe_attention_call& call, int64_t begin, int64_t end) {
    const int32_t hd = call.head_dim;
    const bool halves = call.kv_type == TROUPE_KV_F16;
    for (int64_t t = begin; t < end; ++t) {
        const int32_t* table = call.block_tables[call.seq_of[t]];
        for (int32_t h = 0; h < call.n_kv_heads; ++h) {
            const size_t src = (static_cast<size_t>(t) * call.n_kv_heads + h) * hd;
            const size_t dst = kv_offset(call, table, kv_row(call, t), h);  // elements
            if (halves) {
                isa::to_halves(reinterpret_cast<uint16_t*>(call.k_pool) + dst, call.k + src, hd);
                isa::to_halves(reinterpret_cast<uint16_t*>(call.v_pool) + dst, call.v + src, hd);
            } else {
                std::memcpy(call.k_pool + dst, call.k + src, static_cast<size_t>(hd) * sizeof(float));
                std::memcpy(call.v_pool + dst, call.v + src, static_cast<size_t>(hd) * sizeof(float));
            }
        }
    }
}

}  // namespace
}  // namespace troupe::gqa
